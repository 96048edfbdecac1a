package runtime

import "time"

// OpInfo describes one in-flight operation or attempt, for the management
// endpoint GET /ops.
type OpInfo struct {
	Side     string    `json:"side"` // "client" or "server"
	OpID     string    `json:"op_id"`
	Service  string    `json:"service"`
	Method   string    `json:"method"`
	Entities []string  `json:"entities"`
	Attempt  int       `json:"attempt"`
	Node     string    `json:"node"` // the node running it (client side) or the caller (server side)
	Started  time.Time `json:"started"`
	State    string    `json:"state"` // "queued", "running", "held", "waiting"
}

// InFlighter lists in-flight operations; Client and Server implement it.
type InFlighter interface {
	InFlight() []OpInfo
}
