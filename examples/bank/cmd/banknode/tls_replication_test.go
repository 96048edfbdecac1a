package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/transport"
)

// Two nodes that serve mutual TLS replicate to each other over it: a write
// sent to one is applied on both, and each becomes ready (which it only
// does once it has compared its log with its peer over TLS).
func TestTLSNodesReplicateToEachOther(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two nodes")
	}
	cert, key := writeNodeCert(t)
	ports := freePorts(t, 6)
	addr := func(i int) string { return net.JoinHostPort("127.0.0.1", ports[i]) }
	node := func(name, group string, rpc, gossip, mgmt int, seeds string) config {
		return config{name: name, group: group, groups: "a,b", voters: "a1,b1", rpc: addr(rpc), gossip: addr(gossip), mgmt: addr(mgmt),
			seeds: seeds, preset: "local", logLevel: "error", drain: time.Second, remember: 16, journal: 16,
			tlsCert: cert, tlsKey: key, tlsCA: cert}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	for _, c := range []config{node("a1", "a", 0, 1, 2, ""), node("b1", "b", 3, 4, 5, addr(1))} {
		go func() { done <- run(ctx, c, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	}
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("node: %v", err)
			}
		}
	}()
	hc := cli.ManagementClient(2*time.Second, "")
	for _, mgmt := range []string{addr(2), addr(5)} {
		waitReady(t, hc, mgmt)
	}

	clientTLS, err := cli.ClientTLS(cert, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: "client"}, ClientTLS: clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	settings := runtime.DefaultSettings()
	settings.Groups = []string{"a", "b"}
	// The client dials within the heartbeat timeout, and a TLS handshake
	// under the race detector on a loaded machine can take longer than
	// the default 200 ms: this test is about TLS between the nodes, not
	// about how fast a silent node is left.
	settings.HeartbeatTimeout, settings.AttemptTimeout, settings.OperationTimeout = 2*time.Second, 10*time.Second, 20*time.Second
	members := runtime.NewStaticMembership(
		runtime.Member{Name: "a1", Group: "a", Addr: addr(0), Services: []string{bank.AccountsDesc.Name}},
		runtime.Member{Name: "b1", Group: "b", Addr: addr(3), Services: []string{bank.AccountsDesc.Name}},
	)
	rc, err := runtime.NewClient(runtime.ClientConfig{Transport: tp, Membership: members, Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := bank.NewAccountsClient(rc).Open(ctx, bank.OpenRequest{AccountID: "tls-x", Initial: 42}); err != nil {
		t.Fatalf("Open over TLS: %v", err)
	}
	for _, mgmt := range []string{addr(2), addr(5)} {
		deadline := time.Now().Add(20 * time.Second)
		for {
			r, err := cli.FetchReport(ctx, hc, mgmt, "tls-")
			if err == nil && r.Balances["tls-x"] == 42 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never applied the write: %+v, %v", mgmt, r, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func waitReady(t *testing.T, hc *http.Client, mgmt string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get("http://" + mgmt + "/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready: %v", mgmt, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(l.Addr().String())
		l.Close()
		out = append(out, port)
	}
	return out
}

// writeNodeCert writes a self-signed certificate for 127.0.0.1, usable as
// server and client certificate and as its own CA.
func writeNodeCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "bank node"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
