package runtime

import (
	"context"
	"testing"

	"github.com/ffgen/ffgen/runtime/internal/mdctx"
	"github.com/ffgen/ffgen/runtime/metadata"
)

// TestNoMetadataCostsNoAllocation pins the cost of the feature when unused:
// a call without metadata reads none, and a handler's context serves none,
// without allocating.
func TestNoMetadataCostsNoAllocation(t *testing.T) {
	ctx := WithOperationID(context.Background(), [16]byte{1})
	if n := testing.AllocsPerRun(100, func() {
		if md, err := outgoingPairs(ctx); md != nil || err != nil {
			t.Fatal(md, err)
		}
		if _, ok := operationTimeout(ctx); ok {
			t.Fatal("timeout set")
		}
	}); n != 0 {
		t.Errorf("reading absent call options allocates %v times per call", n)
	}
	actx := &attemptCtx{info: &AttemptInfo{}}
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := metadata.FromIncomingContext(actx); ok {
			t.Fatal("metadata present")
		}
	}); n != 0 {
		t.Errorf("a handler asking for absent metadata allocates %v times", n)
	}
}

func TestOutgoingPairsAreSortedAndValidated(t *testing.T) {
	ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("b", "2", "a", "1", "b", "3"))
	got, err := outgoingPairs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a", "1", "b", "2", "b", "3"}
	if len(got) != len(want) {
		t.Fatalf("pairs %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("pairs %q, want %q", got, want)
		}
	}
	md, err := incomingMD(got)
	if err != nil || len(md["b"]) != 2 || md["a"][0] != "1" {
		t.Errorf("incomingMD = %v, %v", md, err)
	}
	if v := (&attemptCtx{info: &AttemptInfo{md: md}}).Value(mdctx.IncomingKey{}); v == nil {
		t.Error("the handler's context does not serve the metadata")
	}
}
