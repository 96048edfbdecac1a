package runtime

import (
	"log/slog"
	"os"
	"strings"
	"testing"
)

// wantTransitions is the life of an execution, written out again: one row
// per state, one column per event (in the order of the events), the next
// state or "-" where the event cannot happen.
const wantTransitions = `
            queue   hold  start   join      cancel    expire   halt    stopped   returned answer
arrived     queued  held  -       arrived   -         -        arrived -         -        finished
queued      -       -     running queued    expired   expired  queued  -         -        -
held        queued  held  -       held      expired   expired  held    -         -        -
running     -       -     -       running   abandoned -        halted  finished  finished -
abandoned   -       -     -       rerun     -         -        halted  finished  finished -
rerun       -       -     -       rerun     abandoned -        halted  running   finished -
halted      -       -     -       halted    halted    -        halted  finished  finished -
finished    -       -     -       -         -         -        -       -         -        -
expired     -       -     -       -         -         -        -       -         -        -
`

func TestExecTransitionsEveryStateAndEvent(t *testing.T) {
	rows := strings.Split(strings.TrimSpace(wantTransitions), "\n")
	head := strings.Fields(rows[0])
	if len(head) != int(numEvents) {
		t.Fatalf("%d event columns, want %d", len(head), numEvents)
	}
	for i, name := range head {
		if execEvent(i).String() != name {
			t.Fatalf("column %d is %q, event %d is %q", i, name, i, execEvent(i))
		}
	}
	if len(rows)-1 != int(numStates) {
		t.Fatalf("%d state rows, want %d", len(rows)-1, numStates)
	}
	for si, row := range rows[1:] {
		cells := strings.Fields(row)
		st := execState(si)
		if cells[0] != st.String() || len(cells) != int(numEvents)+1 {
			t.Fatalf("row %d: %q; want state %s and %d cells", si, row, st, numEvents)
		}
		for ei, want := range cells[1:] {
			ev := execEvent(ei)
			to, ok := transition(st, ev)
			got := "-"
			if ok {
				got = to.String()
			}
			if got != want {
				t.Errorf("%s + %s = %s, want %s", st, ev, got, want)
			}
		}
	}
}

// Finished and expired are final, and every state but those two can end:
// no execution is stuck for good in the machine.
func TestExecStatesAllReachAnEnd(t *testing.T) {
	final := func(st execState) bool { return st == stateFinished || st == stateExpired }
	for st := range numStates {
		seen := map[execState]bool{st: true}
		frontier := []execState{st}
		ends := final(st)
		for len(frontier) > 0 && !ends {
			cur := frontier[0]
			frontier = frontier[1:]
			for ev := range numEvents {
				if to, ok := transition(cur, ev); ok && !seen[to] {
					seen[to] = true
					ends = ends || final(to)
					frontier = append(frontier, to)
				}
			}
		}
		if !ends {
			t.Errorf("state %s can never end", st)
		}
		if final(st) {
			for ev := range numEvents {
				if _, ok := transition(st, ev); ok {
					t.Errorf("final state %s allows %s", st, ev)
				}
			}
		}
	}
}

// An impossible event is refused, leaving the state as it was, and
// logged as the engine bug it is: under the "ffgen: bug:" prefix, on
// which the logger every test gives its servers (testkit.Logger) fails
// the test.
func TestImpossibleEventIsRefused(t *testing.T) {
	if _, ok := transition(stateFinished, evJoin); ok {
		t.Fatal("a finished execution accepts a join")
	}
	var log strings.Builder
	e := &execution{s: NewServer(ServerConfig{Logger: slog.New(slog.NewTextHandler(&log, nil))}), state: stateExpired}
	if st := e.fire(evStart); st != stateExpired || e.state != stateExpired {
		t.Errorf("start in state expired: fire returned %s and left %s; want expired kept", st, e.state)
	}
	want := `level=ERROR msg="ffgen: bug: impossible execution event; state kept"`
	if got := log.String(); !strings.Contains(got, want) || !strings.Contains(got, "event=start state=expired") {
		t.Errorf("logged %q; want %s naming the event and the state", got, want)
	}
}

// docs/ARCHITECTURE.md shows the same table, in the same order.
func TestExecTransitionsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	var table []string
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "| state \\ event ") || (len(table) > 0 && strings.HasPrefix(line, "|")) {
			table = append(table, line)
		} else if len(table) > 0 {
			break
		}
	}
	if len(table) != int(numStates)+2 {
		t.Fatalf("ARCHITECTURE.md: found %d lines of the state table (from \"| state \\ event \"), want %d", len(table), numStates+2)
	}
	cells := func(line string) []string {
		var out []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			out = append(out, strings.Trim(strings.TrimSpace(c), "*`"))
		}
		return out
	}
	head := cells(table[0])[1:]
	for ei := range numEvents {
		if head[ei] != ei.String() {
			t.Errorf("ARCHITECTURE.md: column %d is %q, want %s", ei, head[ei], ei)
		}
	}
	for si, line := range table[2:] {
		c := cells(line)
		st := execState(si)
		if c[0] != st.String() {
			t.Errorf("ARCHITECTURE.md: row %d is %q, want %s", si, c[0], st)
			continue
		}
		for ei := range numEvents {
			to, ok := transition(st, ei)
			want := ""
			if ok {
				want = to.String()
			}
			if c[1+int(ei)] != want {
				t.Errorf("ARCHITECTURE.md: %s + %s is %q, the code says %q", st, ei, c[1+int(ei)], want)
			}
		}
	}
}
