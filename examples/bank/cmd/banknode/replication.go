package main

import (
	"fmt"
	"slices"

	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/runtime"
)

// ---------------------------------------------------------------------
// The one place where banknode's flags meet the runtime's replication
// settings. The scatter writes' replication is moving to raft: Voters and
// TieBreaker replace MinInSync, AckTimeout and LogEntries. Adjust the field
// names here, and only here, as the runtime settles them. -replication-log
// (LogEntries) no longer reaches the runtime: map it here to whatever
// bounds the raft log, or retire the flag.
// ---------------------------------------------------------------------

// replicationConfig is the replication of the node's scatter writes: the
// voters that form the raft group when the cluster first starts (-voters,
// the same on every node), and whether this node is a tie-breaker
// (-tiebreaker) that votes but never leads and serves no clients. A write
// is acknowledged once a majority of the voters holds it.
func replicationConfig(c config) runtime.ReplicationConfig {
	return runtime.ReplicationConfig{
		Voters:     cli.List(c.voters),
		TieBreaker: c.tieBreaker,
	}
}

// checkReplication refuses replication flags that cannot work: a
// tie-breaker that is not among the voters has no vote to break a tie
// with, and a voter listed twice would count twice.
func checkReplication(c config) error {
	voters := cli.List(c.voters)
	if c.tieBreaker && !slices.Contains(voters, c.name) {
		return fmt.Errorf("-tiebreaker: node %q is not one of -voters %q", c.name, voters)
	}
	seen := map[string]bool{}
	for _, v := range voters {
		if seen[v] {
			return fmt.Errorf("-voters: %q listed twice", v)
		}
		seen[v] = true
	}
	return nil
}
