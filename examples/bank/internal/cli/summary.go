package cli

// The summary bankload prints, and writes as JSON with -json.

// Latency is a latency distribution, in milliseconds for the JSON form.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// Summary is the outcome of a run; -json writes it.
type Summary struct {
	Run string `json:"run"`
	// ServiceVersion is the version of the bank service the load called
	// (v1, or v2 for bankload built with -tags bankv2).
	ServiceVersion string `json:"service_version,omitempty"`
	// NewMethods counts the calls of the methods the v2 service added, by
	// outcome (ok, unimplemented: no node reached served it yet, failed).
	NewMethods map[string]uint64 `json:"new_methods,omitempty"`
	Writers    int               `json:"writers,omitempty"` // logs merged by -audit-only
	Writes     int               `json:"writes"`            // writes recorded, Opens included
	// Clients is how many clients the callers shared (bankload -clients);
	// zero: each caller read through a client of its own, and the writes
	// went through one more.
	Clients       int               `json:"clients,omitempty"`
	Duration      float64           `json:"duration_s"`
	Operations    uint64            `json:"operations"`
	OpsPerSecond  float64           `json:"ops_per_second"`
	Successes     uint64            `json:"successes"`
	ByMethod      map[string]uint64 `json:"by_method"`
	Errors        map[string]uint64 `json:"errors"` // "Method: kind"
	Timeouts      uint64            `json:"timeouts"`
	Uncertain     uint64            `json:"uncertain_writes"`
	Failed        uint64            `json:"failed"`            // ended in an error other than uncertain or ErrInsufficientFunds
	History       string            `json:"history,omitempty"` // the -history file
	Indeterminate uint64            `json:"indeterminate"`     // operations of the history, reads too, that may or may not have applied
	// The linearizability check of the history, if there was one:
	Linearizable       string             `json:"linearizable,omitempty"` // yes, no or unknown
	LinearizableDetail string             `json:"linearizable_detail,omitempty"`
	HistoryCheck       string             `json:"history_check,omitempty"` // what was checked, how long it took
	Failovers          map[string]uint64  `json:"failovers"`               // reads, by reason
	ScatterLegs        map[string]uint64  `json:"scatter_legs_ended"`      // write copies that ended unanswered, by reason
	Latency            Latency            `json:"latency"`
	FailoverLatency    Latency            `json:"failover_latency"` // reads that failed over
	FailoverByReason   map[string]Latency `json:"failover_latency_by_reason"`
	// Admitted is the latency of the operations a node took on, every
	// one but those refused unrun (Refusals).
	Admitted Latency `json:"admitted_latency"`
	// AdmittedByMethod splits Admitted by method: reads and writes wait
	// on different things (a read index, a commit).
	AdmittedByMethod map[string]Latency `json:"admitted_latency_by_method,omitempty"`
	// SchedWait is how long the load generator's own goroutines waited
	// for a core once runnable during the load (the Go runtime's
	// /sched/latencies): a caller's answer waits that long unread.
	SchedWait Latency `json:"load_generator_sched_wait,omitempty"`
	// Refusals are the operations that ended unrun (MaybeExecuted false),
	// by kind: "overloaded" for runtime.ErrOverloaded, else the reason.
	Refusals map[string]uint64 `json:"refusals"`
	// Suspicions are the clients' suspicions of nodes, by reason.
	Suspicions       map[string]uint64 `json:"suspicions"`
	OperationTimeout float64           `json:"operation_timeout_ms"`
	HeartbeatTimeout float64           `json:"heartbeat_timeout_ms"`
	Overdue          uint64            `json:"overdue"` // waited past the operation timeout plus margin
	Audited          bool              `json:"audited"`
	Nodes            []NodeAudit       `json:"nodes"`
	AuditPassed      bool              `json:"audit_passed"`
	// Distinct writes, over every audited node's journal:
	Lost          int `json:"lost"`          // acknowledged, missing on some node
	AppliedTwice  int `json:"applied_twice"` // executed more than once on some node
	Contradicting int `json:"contradicting"` // answered on some node otherwise than the writer was told
}

// NodeAudit is the audit of one node.
type NodeAudit struct {
	Addr       string   `json:"addr"`
	Node       string   `json:"node,omitempty"`
	Group      string   `json:"group,omitempty"`
	Reachable  bool     `json:"reachable"`
	Error      string   `json:"error,omitempty"`
	Applied    uint64   `json:"applied"`
	Replayed   uint64   `json:"replayed"`
	Accounts   int      `json:"accounts"`
	Mismatches []string `json:"mismatches,omitempty"` // balances, the first few
	// From the node's journal, for the writes of the writers audited:
	JournalChecked bool     `json:"journal_checked"`
	JournalEvicted uint64   `json:"journal_evicted"`    // entries it forgot; then Lost is not counted
	Lost           int      `json:"lost"`               // acknowledged writes it never executed
	AppliedTwice   int      `json:"applied_twice"`      // writes it executed more than once
	Contradicting  int      `json:"contradicting"`      // writes it answered otherwise than the writer was told
	Problems       []string `json:"problems,omitempty"` // the first few of each
	Passed         bool     `json:"passed"`
}
