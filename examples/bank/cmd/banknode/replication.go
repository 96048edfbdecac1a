package main

import (
	"errors"
	"fmt"
	"slices"

	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/runtime"
)

// replication is the ledger's raft configuration from the flags: the
// voters that form the group when the cluster first starts (-voters, the
// same on every node), and whether this node is a tie-breaker (-tiebreaker)
// that votes but never leads and serves no clients. A write is
// acknowledged once a majority of the voters holds it (on disk, with
// -data-dir).
func replication(c config) runtime.ReplicationConfig {
	return runtime.ReplicationConfig{Voters: cli.List(c.voters), TieBreaker: c.tieBreaker,
		Cluster: c.clusterName, UnsafeNoFsync: c.noFsync}
}

// checkPlacement checks where the node stands: a serving node in one of
// the failure groups clients route to, a tie-breaker outside them (so that
// no client sends it calls, and no node redirects one there) and among the
// voters (or it has no vote to break a tie with), and every voter listed
// once.
func checkPlacement(c config, groups []string) error {
	voters := cli.List(c.voters)
	if len(voters) == 0 {
		return errors.New("-voters is required: the nodes that replicate the ledger, the same list on every node")
	}
	seen := map[string]bool{}
	for _, v := range voters {
		if seen[v] {
			return fmt.Errorf("-voters: %q listed twice", v)
		}
		seen[v] = true
	}
	in := slices.Contains(groups, c.group)
	switch {
	case c.tieBreaker && in:
		return fmt.Errorf("-tiebreaker: a tie-breaker serves no calls, so its group %q must not be one of -groups %q", c.group, groups)
	case c.tieBreaker && !seen[c.name]:
		return fmt.Errorf("-tiebreaker: node %q is not one of -voters %q", c.name, voters)
	case !c.tieBreaker && !in:
		return fmt.Errorf("group %q is not one of -groups %q", c.group, groups)
	}
	return nil
}
