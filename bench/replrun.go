package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// The replicated-write section: ffgen with its raft state on disk, ffgen
// in memory and etcd, each a three-member cluster in a server process of
// its own and called from a client process of its own, interleaved round
// by round as the RPC systems are. Each round, as in the RPC section, the
// sequential phases come first, each once the section's processes are
// idle: per system replSeq writes one after the other (p50, p99); then
// per system 64 callers sharing one client for cfg.dur.

// replReport is what the replicated-write section measured.
type replReport struct {
	dir    string // the directory the clusters' data was under
	fsType string // its file system
	rounds rounds
}

// runReplicated measures replSystems.
func runReplicated(cfg config) (*replReport, error) {
	if cfg.replRounds < 1 || cfg.replSeq < 10 || cfg.dur <= 0 {
		return nil, errors.New("need at least 1 round, 10 sequential writes and a positive duration")
	}
	base, err := os.MkdirTemp(cfg.replDataDir, "bench-compare-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(base)
	rep := &replReport{dir: filepath.Dir(base), fsType: fsType(base)}
	ps, err := startProcs(cfg, replSystems, base)
	defer ps.stop()
	if err != nil {
		return nil, err
	}
	for r := range cfg.replRounds {
		res := make([]roundResult, len(replSystems))
		terms := make([]uint64, len(replSystems))
		for i, p := range ps.servers {
			st, err := p.stats(false)
			if err != nil {
				return nil, fmt.Errorf("round %d: %s: %w", r+1, replSystems[i].name, err)
			}
			terms[i] = st.term
		}
		// Each round starts with the next system, so none is always
		// measured right after the same neighbour.
		for k := range replSystems {
			i := (r + k) % len(replSystems)
			settle(ps.pids)
			if err := measureSequential(cfg.replSeq, ps.servers[i], ps.clients[i], &res[i]); err != nil {
				return nil, fmt.Errorf("round %d: %s: %w", r+1, replSystems[i].name, err)
			}
		}
		for k := range replSystems {
			i := (r + k) % len(replSystems)
			if err := measureReplConcurrent(cfg, ps.servers[i], ps.clients[i], terms[i], &res[i]); err != nil {
				return nil, fmt.Errorf("round %d: %s: %w", r+1, replSystems[i].name, err)
			}
		}
		rep.rounds = append(rep.rounds, res)
		cfg.say("replicated round %d/%d: p50 %v / %v / %v, 64 callers %.0f / %.0f / %.0f writes/s", r+1, cfg.replRounds,
			res[replDurableIdx].p50, res[replMemoryIdx].p50, res[replEtcdIdx].p50,
			res[replDurableIdx].tput64, res[replMemoryIdx].tput64, res[replEtcdIdx].tput64)
	}
	return rep, nil
}

// measureReplConcurrent measures the writes of 64 callers, and counts the
// raft terms begun since the round began at term.
func measureReplConcurrent(cfg config, p *serverProc, c *clientProc, term uint64, out *roundResult) error {
	tput, ph, err := c.concurrent(callers, cfg.dur)
	if err != nil {
		return err
	}
	out.tput64 = tput
	out.add(ph)
	st, err := p.stats(false)
	if err != nil {
		return err
	}
	out.newTerms = st.term - term
	return nil
}

// Targets: ffgen with fsync against etcd with fsync (issue 28).
const (
	maxReplP50Ratio  = 1.0 // p50 at most etcd's
	minReplTputRatio = 2.0 // 64-caller writes/s at least twice etcd's
)

func (r *replReport) targets() []target {
	return []target{
		{"replicated p50, ffgen fsync/etcd", r.rounds.ratio(replDurableIdx, replEtcdIdx, p50), true, maxReplP50Ratio, "%.2f"},
		{"replicated 64 callers writes/s, ffgen fsync/etcd", r.rounds.ratio(replDurableIdx, replEtcdIdx, tput64), false, minReplTputRatio, "%.2f"},
		{"failed replicated writes, ffgen", float64(r.rounds.failed(replDurableIdx) + r.rounds.failed(replMemoryIdx)), true, 0, "%.0f"},
	}
}

func (r *replReport) print(w io.Writer) {
	fmt.Fprintf(w, "Replicated writes: %d interleaved rounds; three members on loopback, each cluster in its own process, called from one of its own; data under %s (%s); %d-byte key, %d-byte value\n\n",
		len(r.rounds), r.dir, r.fsType, keyLen, payloadLen)
	names := make([]string, len(replSystems))
	for i, s := range replSystems {
		names[i] = s.name
	}
	row := printTable(w, names)
	row("sequential p50", r.rounds.medianDur(p50))
	row("sequential p99", r.rounds.medianDur(p99))
	row(fmt.Sprintf("%d callers, writes/s", callers), r.rounds.medianRate(tput64))
	row("raft terms begun (elections)", func(i int) string {
		var n uint64
		for _, rr := range r.rounds {
			n += rr[i].newTerms
		}
		return fmt.Sprint(n)
	})
	row("failed writes", r.rounds.failedOf)
	fmt.Fprintln(w)
	for _, sys := range []int{replDurableIdx, replMemoryIdx} {
		fmt.Fprintf(w, "%s / etcd: p50 %s, p99 %s, 64-caller writes/s %s\n", replSystems[sys].name,
			r.spread(sys, p50), r.spread(sys, p99), r.spread(sys, tput64))
	}
	fmt.Fprintf(w, "(medians of in-round ratios, lowest and highest in brackets)\n\n")
	printTargets(w, r.targets())
}

// spread prints the median of the in-round ratios of f, sys against etcd,
// and the lowest and highest of them.
func (r *replReport) spread(sys int, f func(roundResult) float64) string {
	xs := r.rounds.ratios(sys, replEtcdIdx, f)
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f [%.2f, %.2f]", median(xs), slices.Min(xs), slices.Max(xs))
}
