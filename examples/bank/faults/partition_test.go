//go:build unix

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/examples/bank/internal/history"
	"github.com/ffgen/ffgen/examples/bank/internal/testbed"
)

// A partition drops connections to the node's ports until healed, and
// closing the firewall leaves no rule, hook or chain behind.
func TestFirewallCutsAndCleansUp(t *testing.T) {
	if testing.Short() {
		t.Skip("changes the firewall; a few seconds")
	}
	ctx := context.Background()
	fw, err := newFirewall(ctx)
	if err != nil {
		t.Skip(err)
	}
	closed := false
	defer func() {
		if !closed {
			fw.close()
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	other, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	n := &testbed.Node{Name: "x", RPC: ln.Addr().String(), Gossip: other.LocalAddr().String()}
	dial := func(timeout time.Duration) error {
		c, err := net.DialTimeout("tcp", n.RPC, timeout)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(10 * time.Second); err != nil {
		t.Fatalf("before the cut: %v", err)
	}
	for _, d := range []direction{both, inbound, outbound} {
		if err := fw.cut(ctx, n, d); err != nil {
			t.Fatal(err)
		}
		// A dropped SYN is retried for seconds: the dial times out.
		if err := dial(2 * time.Second); err == nil {
			t.Errorf("cut %s: dial succeeded", d)
		}
		if err := fw.heal(ctx); err != nil {
			t.Fatal(err)
		}
		if err := dial(10 * time.Second); err != nil {
			t.Fatalf("healed after %s: %v", d, err)
		}
	}
	if err := fw.cut(ctx, n, both); err != nil {
		t.Fatal(err)
	}
	closed = true
	if err := fw.close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("iptables", "-w", "-S").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), fw.chain) {
		t.Fatalf("chain %s left behind:\n%s", fw.chain, out)
	}
}

// A split cuts what one side's processes send to the other side's ports,
// and nothing else: not within a side, not from a process of no side, and
// nothing once healed. The sides are helper processes (this test binary)
// under group IDs of their own.
func TestFirewallSplitsSides(t *testing.T) {
	if testing.Short() {
		t.Skip("changes the firewall; a few seconds")
	}
	ctx := context.Background()
	fw, err := newFirewall(ctx)
	if err != nil {
		t.Skip(err)
	}
	defer fw.close()
	gids := sideGIDs(2)
	sides := []side{{gid: gids[0]}, {gid: gids[1]}}
	if err := fw.mark(ctx, sides); err != nil {
		t.Fatal(err)
	}
	// A listener of side 0: it prints its address and accepts until killed.
	srv := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	srv.Env = append(os.Environ(), "FAULTS_HELPER=listen")
	testbed.SetGID(srv, gids[0])
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Skip("cannot run a process under another group ID:", err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimSpace(line)
	sides[0].nodes = []*testbed.Node{{Name: "s0", RPC: addr, Gossip: addr}}
	sides[1].nodes = []*testbed.Node{{Name: "s1", RPC: "127.0.0.1:1", Gossip: "127.0.0.1:1"}}
	// dial connects to the listener from a process of group ID gid (0:
	// of no side).
	dial := func(gid uint32) error {
		c := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
		c.Env = append(os.Environ(), "FAULTS_HELPER=dial", "FAULTS_HELPER_ADDR="+addr)
		testbed.SetGID(c, gid)
		if out, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	for _, gid := range []uint32{0, gids[0], gids[1]} {
		if err := dial(gid); err != nil {
			t.Fatalf("before the split, from group %d: %v", gid, err)
		}
	}
	if err := fw.split(ctx, sides); err != nil {
		t.Fatal(err)
	}
	if err := dial(gids[1]); err == nil {
		t.Error("split: the other side reached the listener")
	}
	for _, gid := range []uint32{0, gids[0]} {
		if err := dial(gid); err != nil {
			t.Errorf("split: from group %d (no side, or the listener's): %v", gid, err)
		}
	}
	if err := fw.heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dial(gids[1]); err != nil {
		t.Errorf("healed: %v", err)
	}
}

// TestHelperProcess is a side's process for TestFirewallSplitsSides.
func TestHelperProcess(t *testing.T) {
	switch os.Getenv("FAULTS_HELPER") {
	case "listen":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			os.Exit(1)
		}
		fmt.Println(ln.Addr())
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			c.Write([]byte("x"))
			c.Close()
		}
	case "dial":
		c, err := net.DialTimeout("tcp", os.Getenv("FAULTS_HELPER_ADDR"), 2*time.Second)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// failedFrom counts the operations begun at its time or later, and of them
// those that failed for want of service: not an answer of the service
// (insufficient funds), not an outcome unknown, not one begun before.
func TestFailedFromCountsWhatTheServiceDidNotServe(t *testing.T) {
	heal := time.Unix(100, 0)
	at := func(d time.Duration) int64 { return heal.Add(d).UnixNano() }
	ops := []history.Op{
		{Invoke: at(-time.Millisecond), Outcome: history.Fail, Error: "suspected (not executed)"},
		{Invoke: at(0), Outcome: history.OK},
		{Invoke: at(time.Millisecond), Outcome: history.Fail, Error: bank.ErrInsufficientFunds.Error()},
		{Invoke: at(2 * time.Millisecond), Outcome: history.Info, Error: "heartbeat-timeout (delivered, not acknowledged)"},
		{Invoke: at(3 * time.Millisecond), Outcome: history.Fail, Error: "redirected to a1, which is suspected"},
	}
	if failed, begun := failedFrom(ops, heal); failed != 1 || begun != 4 {
		t.Errorf("failedFrom = %d failed of %d begun, want 1 of 4", failed, begun)
	}
}
