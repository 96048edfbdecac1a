package main

import (
	"slices"
	"testing"
)

func TestReplicationFlags(t *testing.T) {
	c := config{name: "t1", voters: "a1, a2,b1,b2,t1", tieBreaker: true}
	if err := checkReplication(c); err != nil {
		t.Fatal(err)
	}
	rc := replicationConfig(c)
	if !slices.Equal(rc.Voters, []string{"a1", "a2", "b1", "b2", "t1"}) || !rc.TieBreaker {
		t.Errorf("replication config %+v", rc)
	}
	for _, bad := range []config{
		{name: "t1", voters: "a1,b1", tieBreaker: true}, // not a voter
		{name: "a1", voters: "a1,b1,a1"},                // twice
	} {
		if err := checkReplication(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
