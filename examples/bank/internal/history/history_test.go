package history

import (
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func TestRecorderStreamsAndReadsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	r, err := Create(path, "w1")
	if err != nil {
		t.Fatal(err)
	}
	want := []Op{
		{Client: 0, ID: "01", Kind: Open, Accounts: []string{"x"}, Amount: 100, Invoke: 1, Return: 2, Outcome: OK, Balance: 100},
		{Client: 1, ID: "02", Kind: Transfer, Accounts: []string{"x", "y"}, Amount: 5, Invoke: 3, Return: 4, Outcome: Fail, Error: "bank: insufficient funds"},
		{Client: 2, ID: "03", Kind: Deposit, Accounts: []string{"x"}, Amount: 7, Invoke: 5, Return: 9, Outcome: Info, Error: "deadline"},
		{Client: 1, ID: "04", Kind: Balance, Accounts: []string{"x"}, Invoke: 6, Return: 8, Outcome: OK, Balance: 0},
	}
	var wg sync.WaitGroup
	for _, op := range want {
		wg.Go(func() { r.Record(op) })
	}
	wg.Wait()
	if c := r.Counts(); c != (Counts{Ops: 4, OK: 2, Failed: 1, Indeterminate: 1}) {
		t.Errorf("counts %+v", c)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d operations, want %d", len(got), len(want))
	}
	byID := map[string]Op{}
	for _, op := range got {
		byID[op.ID] = op
	}
	for _, w := range want {
		w.Process = "w1"
		if g := byID[w.ID]; !reflect.DeepEqual(g, w) {
			t.Errorf("read %+v, want %+v", g, w)
		}
	}
	var nilRec *Recorder
	nilRec.Record(want[0]) // records nothing, and does not panic
	if nilRec.Close() != nil || nilRec.Counts() != (Counts{}) {
		t.Error("a nil recorder is not a no-op")
	}
}

func TestReadRefusesMalformedOperations(t *testing.T) {
	for name, line := range map[string]string{
		"kind":      `{"op":"close","accounts":["x"],"outcome":"ok"}`,
		"accounts":  `{"op":"transfer","accounts":["x"],"outcome":"ok"}`,
		"outcome":   `{"op":"deposit","accounts":["x"],"outcome":"maybe"}`,
		"times":     `{"op":"deposit","accounts":["x"],"outcome":"ok","invoke":5,"return":4}`,
		"truncated": `{"op":"deposit","accounts":["x"],"outc`,
	} {
		if _, err := Read(strings.NewReader(line + "\n")); err == nil {
			t.Errorf("%s: no error for %s", name, line)
		}
	}
}
