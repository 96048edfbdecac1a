//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/examples/bank/internal/testbed"
)

// Faults of the nodes' data directories (banknode -data-dir, which every
// node of the suite has): what must survive kill -9 of everything, and what
// a node does with a file it must not trust or a disk that fills.

// durableFaults are the rows of the data directories.
var durableFaults = []fault{
	{name: "power-cut", about: "SIGKILL every node at once under load, start them all: every acknowledged write comes back from disk", run: powerCut},
	{name: "torn-tail", about: "SIGKILL b2, cut its log's last record short, start it: it cuts the torn record and catches up", run: tornTail("b2")},
	{name: "corrupt-file", about: "SIGKILL b2, flip bytes in the records of its log, start it: it sets its state aside and catches up", run: corruptFile("b2")},
	{name: "emptied-dir", about: "SIGKILL b2, delete its data directory, start it: a new member that catches up", run: emptiedDir("b2")},
	{name: "removed-while-down", about: "SIGKILL b2, remove it from the voters on the leader (DELETE /cluster/replicas/…/voters/b2), start it: it says it is out; SIGTERM and start it: a new member that catches up",
		env: []string{"FFGEN_MANAGE_WRITE=1"}, run: removedWhileDown("b2")},
	{name: "full-disk", about: "b2's data directory on a 48 MiB tmpfs (32 KiB log segments), filled during the load, then freed",
		env: []string{"FFGEN_WAL_SEGMENT_BYTES=32768"}, prepare: smallDisk("b2", 48<<20), run: fullDisk("b2")},
}

// serviceDir is n's directory of the ledger's replicated state.
func serviceDir(e *env, n *testbed.Node) string {
	return filepath.Join(e.DataDir(n), bank.AccountsDesc.Name)
}

// lastSegment is the newest segment of n's log, and the length of what is
// written in it (the rest of a segment is allocated, and zero).
func lastSegment(e *env, n *testbed.Node) (string, int, error) {
	segs, _ := filepath.Glob(filepath.Join(serviceDir(e, n), "wal", "*.wal"))
	if len(segs) == 0 {
		return "", 0, fmt.Errorf("no log segment in %s", serviceDir(e, n))
	}
	path := segs[len(segs)-1]
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0, err
	}
	return path, len(bytes.TrimRight(b, "\x00")), nil
}

func powerCut(ctx context.Context, e *env) error {
	if err := e.at(ctx, e.start()); err != nil {
		return err
	}
	return e.powerCut(ctx, e.bounded(downFor, 0.15))
}

// whileDown SIGKILLs name at the fault's start, does down to it while it
// is stopped, and starts it again.
func whileDown(name string, down func(e *env, n *testbed.Node) error) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		n := e.Node(name)
		if err := e.at(ctx, e.start()); err != nil {
			return err
		}
		if err := e.Kill(n); err != nil {
			return err
		}
		if err := down(e, n); err != nil {
			return err
		}
		return e.restart(n)
	}
}

// noteSetAside notes, once n has had time to start, whether it set its
// state aside as corrupt.
func noteSetAside(e *env, n *testbed.Node, aside, kept string) {
	dir := serviceDir(e, n)
	go func() {
		sleep(e.ctx, 2*time.Second)
		if m, _ := filepath.Glob(filepath.Join(dir, "corrupt-*")); len(m) > 0 {
			e.note("%s %s", n.Name, aside)
		} else {
			e.note("%s %s", n.Name, kept)
		}
	}()
}

func tornTail(name string) func(context.Context, *env) error {
	return whileDown(name, func(e *env, n *testbed.Node) error {
		path, written, err := lastSegment(e, n)
		if err != nil {
			return err
		}
		// A crash mid-append leaves the last record short: cut it a few
		// bytes before its end. (The node had synced it, so its peers
		// have it too: what the node loses comes back from them.)
		cut := max(written-5, 0)
		if err := os.Truncate(path, int64(cut)); err != nil {
			return err
		}
		e.note("%s: %s cut from %d to %d bytes written", n.Name, filepath.Base(path), written, cut)
		noteSetAside(e, n, "set its state aside and rejoined as a new member",
			"cut the torn record and kept its state")
		return nil
	})
}

func corruptFile(name string) func(context.Context, *env) error {
	return whileDown(name, func(e *env, n *testbed.Node) error {
		path, written, err := lastSegment(e, n)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// Account IDs end in -NNNNN: every write's record holds one.
		flipped := 0
		for i := 0; i+6 < written; i++ {
			if b[i] == '-' && b[i+1] == '0' && b[i+2] == '0' {
				b[i+2] ^= 0x20
				flipped++
			}
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
		e.note("%s: %d bytes flipped in %s", n.Name, flipped, filepath.Base(path))
		noteSetAside(e, n, "set its corrupt state aside and rejoined as a new member", "did not set its corrupt state aside")
		return nil
	})
}

func emptiedDir(name string) func(context.Context, *env) error {
	return whileDown(name, func(e *env, n *testbed.Node) error {
		if err := os.RemoveAll(e.DataDir(n)); err != nil {
			return err
		}
		e.note("%s: data directory deleted", n.Name)
		return nil
	})
}

// removedBound bounds how long a removed node may take to say it is out
// once started: its peers tell it at its first hello or raft message.
const removedBound = 30 * time.Second

// removedWhileDown has the operator take name, killed, for gone: it is
// removed on the leader, then started from its data directory after all.
// It must say that it is out (not wait for a leader for ever, nor serve),
// and once started again join as a new member and catch up.
func removedWhileDown(name string) func(context.Context, *env) error {
	removeAndStart := whileDown(name, func(e *env, n *testbed.Node) error { return e.removeReplica(e.ctx, n.Name) })
	return func(ctx context.Context, e *env) error {
		if err := removeAndStart(ctx, e); err != nil {
			return err
		}
		n := e.Node(name)
		started := time.Now()
		for {
			reps, err := replicaStatuses(e)
			if err != nil {
				return err
			}
			if r, ok := reps[name]; ok && r.Removed {
				if r.Ready {
					return fmt.Errorf("%s says it is out and ready: %+v", name, r)
				}
				e.note("%s said it is out %v after its start: %s", name, time.Since(started).Round(time.Millisecond), r.NotReady)
				break
			}
			if time.Since(started) > removedBound {
				return fmt.Errorf("%s, removed while down, did not say it is out within %v: %+v", name, removedBound, reps[name])
			}
			sleep(ctx, 50*time.Millisecond)
		}
		return e.restartRemoved(n)
	}
}

// removeReplica has the operator take name out of the ledger's raft
// group on its leader (the nodes run with -manage-write): DELETE
// /cluster/replicas/…/voters/name, which answers once the leader applied
// the change.
func (e *env) removeReplica(ctx context.Context, name string) error {
	l, _, err := leader(ctx, e)
	if err != nil {
		return err
	}
	url := "http://" + e.Node(l).Mgmt + "/cluster/replicas/" + bank.AccountsDesc.Name + "/voters/" + name
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, url, nil)
	if err != nil {
		return err
	}
	resp, err := e.Client().Do(req)
	if err != nil {
		return fmt.Errorf("remove %s on %s: %w", name, l, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("remove %s on %s: %s: %s", name, l, resp.Status, bytes.TrimSpace(body))
	}
	e.note("%s removed from the voters on %s", name, l)
	return nil
}

// restartRemoved restarts n, which says it is out of the group, as its
// status asks the operator to: SIGTERM, and a start, after which it joins
// as a new member.
func (e *env) restartRemoved(n *testbed.Node) error {
	if err := e.Terminate(n, 30*time.Second); err != nil {
		return err
	}
	return e.restart(n)
}

// smallDisk mounts a tmpfs of size bytes as name's data directory before
// the cluster starts, and returns its unmounting. Without the right to
// mount, the row is skipped.
func smallDisk(name string, size int64) func(ctx context.Context, dir string) (func(), error) {
	return func(ctx context.Context, dir string) (func(), error) {
		mnt := filepath.Join(dir, "data", name)
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			return nil, err
		}
		out, err := exec.CommandContext(ctx, "mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", mnt).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("%w: mount a tmpfs: %v: %s", errSkip, err, out)
		}
		return func() { exec.Command("umount", "-l", mnt).Run() }, nil
	}
}

// errSkip marks a fault's preparation that the machine cannot do.
var errSkip = errors.New("skipped")

func fullDisk(name string) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		n := e.Node(name)
		if err := e.at(ctx, e.start()); err != nil {
			return err
		}
		filler := filepath.Join(e.DataDir(n), "filler")
		f, err := os.Create(filler)
		if err != nil {
			return err
		}
		chunk := make([]byte, 1<<20)
		var filled int64
		for {
			k, err := f.Write(chunk)
			filled += int64(k)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				f.Close()
				return err
			}
		}
		f.Close()
		e.note("%s: disk filled (%d MiB more)", n.Name, filled>>20)
		full := time.Now()
		notReady := false
		for time.Since(full) < 10*time.Second && ctx.Err() == nil {
			if !e.Ready(n) {
				notReady = true
				e.note("%s: not ready %v after the disk filled", n.Name, time.Since(full).Round(10*time.Millisecond))
				break
			}
			sleep(ctx, 50*time.Millisecond)
		}
		if !notReady {
			e.note("%s: still ready 10 s after the disk filled (its log segment had room)", n.Name)
		}
		sleep(ctx, e.bounded(downFor, 0.15))
		if err := os.Remove(filler); err != nil {
			return err
		}
		e.note("%s: space freed", n.Name)
		e.recover(n)
		return nil
	}
}
