//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/ffgen/ffgen/examples/bank/internal/testbed"
)

// firewall partitions nodes with iptables rules on their RPC and gossip
// ports, in a chain of its own that it hooks into INPUT: on loopback every
// packet passes INPUT once, whichever way it goes. Rules match the node's
// listening ports, so they cut every connection to the node and the
// gossip it sends from its port; connections the node dials itself leave
// from ephemeral ports and are cut only where they reach a cut port.
type firewall struct {
	chain string
}

// errNoFirewall says why partitions cannot run here.
var errNoFirewall = errors.New("partitions need iptables and the right to use it (root, CAP_NET_ADMIN)")

// newFirewall creates the chain and hooks it in, or says why it cannot.
func newFirewall(ctx context.Context) (*firewall, error) {
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, fmt.Errorf("%w: iptables not found (make faults-deps installs it)", errNoFirewall)
	}
	f := &firewall{chain: fmt.Sprintf("FFGEN-FAULTS-%d", os.Getpid())}
	if err := f.ipt(ctx, "-N", f.chain); err != nil {
		return nil, fmt.Errorf("%w: %v", errNoFirewall, err)
	}
	if err := f.ipt(ctx, "-I", "INPUT", "-j", f.chain); err != nil {
		f.ipt(context.WithoutCancel(ctx), "-X", f.chain)
		return nil, fmt.Errorf("%w: %v", errNoFirewall, err)
	}
	return f, nil
}

func (f *firewall) ipt(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// direction of a partition, as the node sees it.
type direction int

const (
	both     direction = iota
	inbound            // the node receives nothing on its ports
	outbound           // nothing leaves the node's ports
)

func (d direction) String() string { return [...]string{"both ways", "inbound", "outbound"}[d] }

// cut drops n's traffic in direction d until heal.
func (f *firewall) cut(ctx context.Context, n *testbed.Node, d direction) error {
	for _, addr := range []string{n.RPC, n.Gossip} {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return err
		}
		for _, proto := range []string{"tcp", "udp"} {
			var matches []string
			if d == both || d == inbound {
				matches = append(matches, "--dport")
			}
			if d == both || d == outbound {
				matches = append(matches, "--sport")
			}
			for _, m := range matches {
				if err := f.ipt(ctx, "-A", f.chain, "-i", "lo", "-p", proto, m, port, "-j", "DROP"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// heal removes every rule.
func (f *firewall) heal(ctx context.Context) error { return f.ipt(ctx, "-F", f.chain) }

// close removes the rules, the hook and the chain, even if ctx has ended.
func (f *firewall) close() error {
	ctx := context.Background()
	return errors.Join(f.heal(ctx), f.ipt(ctx, "-D", "INPUT", "-j", f.chain), f.ipt(ctx, "-X", f.chain))
}
