package cluster

import (
	"fmt"
	"net/http"
	goruntime "runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxProfileSeconds bounds a CPU profile or trace that one request asks for.
const maxProfileSeconds = 120

// pprof serves the profiles that `go tool pprof` and `go tool trace` read,
// under /debug/pprof/: the index, every named profile (heap, goroutine,
// allocs, block, mutex, threadcreate), profile (CPU, ?seconds=30) and
// trace (?seconds=1). It speaks net/http/pprof's URLs but does not import
// that package, whose init serves the same handlers on
// http.DefaultServeMux: a library must not open a profiling endpoint on an
// application's own server. cmdline is left out: a command line can hold
// secrets.
func (m *management) pprof(w http.ResponseWriter, r *http.Request) {
	if m.cfg.DisablePprof {
		writeError(w, http.StatusNotFound, "pprof is disabled on this node")
		return
	}
	switch name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/"); name {
	case "":
		pprofIndex(w)
	case "profile":
		pprofTimed(w, r, 30, func() error { return pprof.StartCPUProfile(w) }, pprof.StopCPUProfile)
	case "trace":
		pprofTimed(w, r, 1, func() error { return trace.Start(w) }, trace.Stop)
	default:
		p := pprof.Lookup(name)
		if p == nil {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no profile %q", name))
			return
		}
		debug, _ := strconv.Atoi(r.FormValue("debug"))
		if name == "heap" && r.FormValue("gc") != "" {
			goruntime.GC()
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if debug > 0 {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		} else {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
		}
		p.WriteTo(w, debug)
	}
}

func pprofIndex(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	ps := pprof.Profiles()
	slices.SortFunc(ps, func(a, b *pprof.Profile) int { return strings.Compare(a.Name(), b.Name()) })
	fmt.Fprintln(w, "profiles (GET /debug/pprof/<name>, ?debug=1 for text):")
	for _, p := range ps {
		fmt.Fprintf(w, "  %-14s %d\n", p.Name(), p.Count())
	}
	fmt.Fprintln(w, "  profile        CPU profile, ?seconds=30")
	fmt.Fprintln(w, "  trace          execution trace, ?seconds=1")
}

// pprofTimed runs a profile for ?seconds (def if absent), bounded, and
// ends it early if the client goes away.
func pprofTimed(w http.ResponseWriter, r *http.Request, def int, start func() error, stop func()) {
	sec := def
	if v := r.FormValue("seconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > maxProfileSeconds {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("seconds must be 1 to %d, got %q", maxProfileSeconds, v))
			return
		}
		sec = n
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if err := start(); err != nil {
		w.Header().Del("Content-Type")
		writeError(w, http.StatusConflict, "cannot start: "+err.Error()) // one at a time per process
		return
	}
	t := time.NewTimer(time.Duration(sec) * time.Second)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
	stop()
}
