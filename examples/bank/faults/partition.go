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
//
// A split into sides (several nodes, and the clients beside them, against
// the rest) cannot be told by port alone: every process dials from
// ephemeral ports of 127.0.0.1. So each side's processes run under a group
// ID of their own, and two more chains hooked into OUTPUT, where iptables
// knows which process sends a packet, do the rest: the marks chain labels
// every TCP connection with the side of the process that opened it, and
// the cuts chain drops what a side's process sends to another side's
// ports, and what a side's ports answer on connections another side
// opened. Processes of no side (the suite, the opener, the audit) reach
// every node.
type firewall struct {
	chain string // INPUT; chain+"-M" (marks) and chain+"-O" (cuts) in OUTPUT
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
	for _, c := range []string{f.marks(), f.cuts()} {
		err := f.ipt(ctx, "-N", c)
		if err == nil {
			err = f.ipt(ctx, "-I", "OUTPUT", "-j", c)
		}
		if err != nil {
			f.close()
			return nil, fmt.Errorf("%w: %v", errNoFirewall, err)
		}
	}
	return f, nil
}

func (f *firewall) marks() string { return f.chain + "-M" }
func (f *firewall) cuts() string  { return f.chain + "-O" }

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

// heal removes every cut; the marks stay.
func (f *firewall) heal(ctx context.Context) error {
	return errors.Join(f.ipt(ctx, "-F", f.chain), f.ipt(ctx, "-F", f.cuts()))
}

// close removes the rules, the hooks and the chains, even if ctx has
// ended; it ignores what is not there.
func (f *firewall) close() error {
	ctx := context.Background()
	var errs []error
	for _, c := range []struct{ hook, chain string }{{"INPUT", f.chain}, {"OUTPUT", f.marks()}, {"OUTPUT", f.cuts()}} {
		if f.ipt(ctx, "-n", "-L", c.chain) != nil {
			continue // never created
		}
		errs = append(errs, f.ipt(ctx, "-F", c.chain))
		for f.ipt(ctx, "-C", c.hook, "-j", c.chain) == nil {
			if err := f.ipt(ctx, "-D", c.hook, "-j", c.chain); err != nil {
				errs = append(errs, err)
				break
			}
		}
		errs = append(errs, f.ipt(ctx, "-X", c.chain))
	}
	return errors.Join(errs...)
}

// side is one side of a split: its nodes, and the group ID that its
// processes (those nodes, and the writers beside them) run under.
type side struct {
	nodes []*testbed.Node
	gid   uint32
}

// sideGIDs returns n group IDs for the sides of a split: numbers no
// account uses, distinct for concurrent suites.
func sideGIDs(n int) []uint32 {
	base := uint32(1<<20) + uint32(os.Getpid()%100000)*8
	gids := make([]uint32, n)
	for i := range gids {
		gids[i] = base + uint32(i) + 1
	}
	return gids
}

// connMark is the mark of the connections side i opened.
func connMark(i int) string { return fmt.Sprintf("0x%x", 0x46460000+i+1) }

// mark labels every TCP connection a side's process opens with the side,
// from now on: call it before those processes start.
func (f *firewall) mark(ctx context.Context, sides []side) error {
	for i, s := range sides {
		if err := f.ipt(ctx, "-A", f.marks(), "-o", "lo", "-p", "tcp", "-m", "conntrack", "--ctstate", "NEW",
			"-m", "owner", "--gid-owner", fmt.Sprint(s.gid), "-j", "CONNMARK", "--set-mark", connMark(i)); err != nil {
			return err
		}
	}
	return nil
}

// unmark removes the marks.
func (f *firewall) unmark(ctx context.Context) error { return f.ipt(ctx, "-F", f.marks()) }

// split cuts every side off from the others until heal: what a side's
// process sends to another side's RPC and gossip ports, and what another
// side's ports send back on a connection the side opened. The sides must
// have been marked (mark) before their processes started.
func (f *firewall) split(ctx context.Context, sides []side) error {
	ports := make([]string, len(sides))
	for i, s := range sides {
		var ps []string
		for _, n := range s.nodes {
			for _, addr := range []string{n.RPC, n.Gossip} {
				_, port, err := net.SplitHostPort(addr)
				if err != nil {
					return err
				}
				ps = append(ps, port)
			}
		}
		ports[i] = strings.Join(ps, ",") // multiport takes up to 15
	}
	for i, from := range sides {
		for j := range sides {
			if i == j {
				continue
			}
			for _, proto := range []string{"tcp", "udp"} {
				if err := f.ipt(ctx, "-A", f.cuts(), "-o", "lo", "-p", proto, "-m", "owner", "--gid-owner", fmt.Sprint(from.gid),
					"-m", "multiport", "--dports", ports[j], "-j", "DROP"); err != nil {
					return err
				}
			}
			if err := f.ipt(ctx, "-A", f.cuts(), "-o", "lo", "-p", "tcp", "-m", "multiport", "--sports", ports[j],
				"-m", "connmark", "--mark", connMark(i), "-j", "DROP"); err != nil {
				return err
			}
		}
	}
	return nil
}
