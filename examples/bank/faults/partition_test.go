//go:build unix

package main

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

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
