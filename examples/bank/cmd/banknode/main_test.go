package main

import (
	"encoding/base64"
	"errors"
	"slices"
	"testing"

	"github.com/ffgen/ffgen/runtime/cluster"
)

func TestClusterConfig(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(make([]byte, 16))
	cfg, err := clusterConfig(config{name: "a1", group: "a", gossip: "127.0.0.1:7001", seeds: "h:1, h:2,", preset: "local", key: key})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "a1" || cfg.Group != "a" || cfg.BindAddr != "127.0.0.1" || cfg.BindPort != 7001 ||
		!slices.Equal(cfg.Seeds, []string{"h:1", "h:2"}) || len(cfg.SecretKey) != 16 || cfg.Preset != cluster.PresetLocal {
		t.Fatalf("config = %+v", cfg)
	}
	for _, bad := range []config{
		{gossip: "nohost", preset: "lan"},
		{gossip: "127.0.0.1:x", preset: "lan"},
		{gossip: "127.0.0.1:1", preset: "wan"},
		{gossip: "127.0.0.1:1", preset: "lan", key: "!!"},
	} {
		if _, err := clusterConfig(bad); err == nil {
			t.Errorf("clusterConfig(%+v) accepted", bad)
		}
	}
}

func TestManagementLoopbackOnly(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:8558", "localhost:1", "[::1]:2"} {
		if err := loopbackOnly(ok); err != nil {
			t.Errorf("loopbackOnly(%s) = %v", ok, err)
		}
	}
	for _, bad := range []string{"0.0.0.0:8558", ":8558", "10.0.0.1:1", "example.com:1"} {
		if err := loopbackOnly(bad); !errors.Is(err, cluster.ErrInsecureManagement) {
			t.Errorf("loopbackOnly(%s) = %v, want ErrInsecureManagement", bad, err)
		}
	}
}
