package tally

import (
	"testing"
	"time"
)

func TestBucketBoundsInclusive(t *testing.T) {
	var h Histogram
	h.Observe(time.Millisecond)     // le="0.001": the bound is inclusive
	h.Observe(time.Millisecond + 1) // next bucket
	h.Observe(time.Hour)            // above every bound
	counts, sum := h.Load()
	if counts[0] != 1 || counts[1] != 1 || counts[len(LatencyBuckets)] != 1 {
		t.Fatalf("bucket counts = %v", counts)
	}
	if want := 2*time.Millisecond + 1 + time.Hour; sum != want {
		t.Errorf("sum %v, want %v", sum, want)
	}
}

func TestAnswersCountEachKindOnce(t *testing.T) {
	var a Answers
	for range 3 {
		a.Counter("ok", "").Add(1)
		a.Counter("fail", "bank.insufficient-funds").Add(1)
	}
	a.Counter("refused", "ffgen.not-started").Add(1)
	got := map[string]uint64{}
	a.Each(func(status, code string, n uint64) { got[status+" "+code] += n })
	want := map[string]uint64{"ok ": 3, "fail bank.insufficient-funds": 3, "refused ffgen.not-started": 1}
	if len(got) != len(want) {
		t.Fatalf("counted %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("counted %v, want %v", got, want)
		}
	}
}
