package runtime

import (
	"testing"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
)

// lendLog is a connection's read goroutine that records how it was asked
// to run work, and runs none of it.
type lendLog struct{ inline, ahead int }

func (l *lendLog) Queue(frame.Frame) error { return nil }

func (l *lendLog) RunInline(interface{ Run() }, time.Duration) bool {
	l.inline++
	return true
}

func (l *lendLog) RunAhead(interface{ Run() }, time.Duration) { l.ahead++ }

// A method whose handler runs for less than a handoff costs runs ahead of
// the frames waiting behind it; one that is only quick runs inline when
// nothing waits; an overrun makes a tiny method neither at once.
func TestTinyMethodsRunAheadOfWaitingFrames(t *testing.T) {
	sm := new(servedMethod)
	e := &execution{sm: sm}
	var l lendLog
	sc := &serverConn{inline: &l}
	s := new(Server)
	run := func(want lendLog) {
		t.Helper()
		l = lendLog{}
		s.runInline(sc, e)
		if l != want {
			t.Errorf("average %v: lent as %+v, want %+v", time.Duration(sm.pace.avg.Load()), l, want)
		}
	}
	run(lendLog{ahead: 1}) // a method starts out tiny
	for range 64 {
		sm.pace.observe(time.Microsecond)
	}
	run(lendLog{ahead: 1})
	for range 64 {
		sm.pace.observe(50 * time.Microsecond)
	}
	if !sm.pace.quick() {
		t.Fatalf("average %v: not quick", time.Duration(sm.pace.avg.Load()))
	}
	run(lendLog{inline: 1})
	for range 64 {
		sm.pace.observe(time.Microsecond)
	}
	run(lendLog{ahead: 1})
	e.Overran()
	if sm.pace.quick() || sm.pace.tiny() {
		t.Errorf("average %v after an overrun: quick %v, tiny %v; want neither", time.Duration(sm.pace.avg.Load()), sm.pace.quick(), sm.pace.tiny())
	}
}
