package main

import (
	"slices"
	"strings"
	"testing"
)

func TestReplicationFlags(t *testing.T) {
	groups := []string{"a", "b"}
	c := config{name: "t1", group: "t", voters: "a1, a2,b1,b2,t1", tieBreaker: true}
	if err := checkPlacement(c, groups); err != nil {
		t.Fatal(err)
	}
	rc := replication(c)
	if !slices.Equal(rc.Voters, []string{"a1", "a2", "b1", "b2", "t1"}) || !rc.TieBreaker {
		t.Errorf("replication config %+v", rc)
	}
	for _, bad := range []struct {
		c    config
		want string
	}{
		{config{name: "t1", group: "t", voters: "a1,b1", tieBreaker: true}, "not one of -voters"},
		{config{name: "t1", group: "a", voters: "a1,b1,t1", tieBreaker: true}, "must not be one of -groups"},
		{config{name: "a1", group: "a", voters: "a1,b1,a1"}, "listed twice"},
		{config{name: "a1", group: "a"}, "-voters is required"},
		{config{name: "z1", group: "z", voters: "z1"}, `group "z" is not one of -groups`},
	} {
		if err := checkPlacement(bad.c, groups); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: %v, want an error saying %q", bad.c, err, bad.want)
		}
	}
}
