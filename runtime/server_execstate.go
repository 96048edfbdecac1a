package runtime

import "fmt"

// The life of an execution on the server, as one state machine: every
// change of an execution's state is an event passed to fire, and the
// table below is the whole of what may happen. docs/ARCHITECTURE.md shows
// the same table (a test keeps the two equal).
//
// The events come from four goroutines, always under s.mu: the
// connection's read goroutine (an attempt arrives or joins, a cancel), the
// execution's own goroutine (the handler returned or was stopped), the
// heartbeat ticker (the attempt's time ran out while it waited), and
// Close or Shutdown (the server halts).

type execState uint8

const (
	stateArrived   execState = iota // created; a replicated write waits here for its commit
	stateQueued                     // in its entities' queues, waiting to head all of them
	stateHeld                       // a hold operation waiting aside for its entities to go idle
	stateRunning                    // its handler runs
	stateAbandoned                  // running, but every waiter cancelled: its handler is being stopped
	stateRerun                      // abandoned, then an attempt joined: it runs again once stopped
	stateHalted                     // running when the server halted: stopped, and not run again
	stateFinished                   // answered; off the queues
	stateExpired                    // ended without running: its time ran out, nobody wanted it, or the server halted
	numStates
)

type execEvent uint8

const (
	evQueue    execEvent = iota // it goes into its entities' queues: on arrival, or a held one whose entities went idle
	evHold                      // on arrival, or rescheduled, its entities are busy and it may wait aside
	evStart                     // it heads all its queues, with time left
	evJoin                      // another attempt of the operation arrived
	evCancel                    // its last waiter cancelled
	evExpire                    // it would start, or still waits, but its time is up or the server halted
	evHalt                      // the server halts (Close, or Shutdown past its deadline)
	evStopped                   // the handler returned because the engine ended its context
	evReturned                  // the handler returned an outcome of its own (or forwarded)
	evAnswer                    // answered without running (a replicated write refused or redirected)
	numEvents
)

var stateNames = [numStates]string{"arrived", "queued", "held", "running", "abandoned", "rerun", "halted", "finished", "expired"}

var eventNames = [numEvents]string{"queue", "hold", "start", "join", "cancel", "expire", "halt", "stopped", "returned", "answer"}

func (st execState) String() string {
	if st < numStates {
		return stateNames[st]
	}
	return fmt.Sprintf("state(%d)", uint8(st))
}

func (ev execEvent) String() string {
	if ev < numEvents {
		return eventNames[ev]
	}
	return fmt.Sprintf("event(%d)", uint8(ev))
}

// noTransition marks an event that cannot happen in a state.
const noTransition = execState(0xff)

// transitions[state][event] is the next state. Anything not listed is a
// bug in the engine.
var transitions = func() (t [numStates][numEvents]execState) {
	for i := range t {
		for j := range t[i] {
			t[i][j] = noTransition
		}
	}
	for _, tr := range []struct {
		from execState
		ev   execEvent
		to   execState
	}{
		{stateArrived, evQueue, stateQueued},
		{stateArrived, evHold, stateHeld},
		{stateArrived, evJoin, stateArrived},
		{stateArrived, evHalt, stateArrived}, // the replicated log answers it
		{stateArrived, evAnswer, stateFinished},

		{stateQueued, evStart, stateRunning},
		{stateQueued, evJoin, stateQueued},
		{stateQueued, evCancel, stateExpired},
		{stateQueued, evExpire, stateExpired},
		{stateQueued, evHalt, stateQueued}, // ends when it would start

		{stateHeld, evQueue, stateQueued},
		{stateHeld, evHold, stateHeld},
		{stateHeld, evJoin, stateHeld},
		{stateHeld, evCancel, stateExpired},
		{stateHeld, evExpire, stateExpired},
		{stateHeld, evHalt, stateHeld}, // ends when it would start

		{stateRunning, evJoin, stateRunning},
		{stateRunning, evCancel, stateAbandoned},
		{stateRunning, evHalt, stateHalted},
		{stateRunning, evStopped, stateFinished},
		{stateRunning, evReturned, stateFinished},

		{stateAbandoned, evJoin, stateRerun},
		{stateAbandoned, evHalt, stateHalted},
		{stateAbandoned, evStopped, stateFinished},
		{stateAbandoned, evReturned, stateFinished},

		{stateRerun, evJoin, stateRerun},
		{stateRerun, evCancel, stateAbandoned},
		{stateRerun, evHalt, stateHalted},
		{stateRerun, evStopped, stateRunning},
		{stateRerun, evReturned, stateFinished},

		{stateHalted, evJoin, stateHalted},
		{stateHalted, evCancel, stateHalted},
		{stateHalted, evHalt, stateHalted},
		{stateHalted, evStopped, stateFinished},
		{stateHalted, evReturned, stateFinished},
	} {
		t[tr.from][tr.ev] = tr.to
	}
	return t
}()

// transition is the state after ev in st, and whether ev may happen in st.
func transition(st execState, ev execEvent) (execState, bool) {
	if st >= numStates || ev >= numEvents {
		return st, false
	}
	to := transitions[st][ev]
	return to, to != noTransition
}

// fire moves e by ev and returns its new state. An event its state does
// not allow leaves the state as it was and is logged as the bug it is,
// under a message that starts "ffgen: bug:": a node goes on, and the
// tests' logger (internal/testkit.Logger, fftest's default) fails the
// test. Called with s.mu held.
func (e *execution) fire(ev execEvent) execState {
	to, ok := transition(e.state, ev)
	if !ok {
		e.s.cfg.Logger.Error("ffgen: bug: impossible execution event; state kept",
			"op", e.info.OpIDString(), "event", ev.String(), "state", e.state.String())
		return e.state
	}
	e.state = to
	if e.waitsIn && !to.waiting() {
		e.waitsIn = false
		e.s.waiting--
	}
	return to
}

// waiting reports whether an execution in st waits to start: a replicated
// write or read for the log, or one queued behind its entities. What
// ServerConfig.MaxQueued counts; a held operation waits aside on purpose,
// and is not counted.
func (st execState) waiting() bool { return st == stateArrived || st == stateQueued }

// reported is the state InFlight shows, in the words of OpInfo.State: a
// handler being stopped still runs, and a replicated write waiting for its
// commit is queued.
func (st execState) reported() string {
	switch st {
	case stateArrived:
		return "queued"
	case stateAbandoned, stateRerun, stateHalted:
		return "running"
	}
	return st.String()
}
