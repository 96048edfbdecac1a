package cluster

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/ffgen/ffgen/internal/testkit"
)

// testDNS is an authoritative DNS server on loopback UDP whose records the
// test changes while it runs, and a resolver that asks only it.
type testDNS struct {
	mu   sync.Mutex
	a    map[string][]string  // name -> IPv4 addresses
	srv  map[string][]dns.SRV // name -> records
	asks map[string]int       // questions per name

	Resolver *net.Resolver
}

func startDNS(t *testing.T) *testDNS {
	t.Helper()
	d := &testDNS{a: map[string][]string{}, srv: map[string][]dns.SRV{}, asks: map[string]int{}}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	s := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(d.serve), NotifyStartedFunc: func() { close(started) }}
	go s.ActivateAndServe()
	<-started
	t.Cleanup(func() { s.Shutdown() })
	addr := pc.LocalAddr().String()
	d.Resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", addr)
	}}
	return d
}

func (d *testDNS) setA(name string, ips ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.a[dns.Fqdn(name)] = ips
}

// setSRV points name at targets ("host:port"), each host getting an A
// record of 127.0.0.1.
func (d *testDNS) setSRV(name string, targets ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var recs []dns.SRV
	for _, t := range targets {
		host, port, _ := net.SplitHostPort(t)
		p, _ := strconv.Atoi(port)
		recs = append(recs, dns.SRV{Target: dns.Fqdn(host), Port: uint16(p), Priority: 10, Weight: 10})
		d.a[dns.Fqdn(host)] = []string{"127.0.0.1"}
	}
	d.srv[dns.Fqdn(name)] = recs
}

func (d *testDNS) asked(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asks[dns.Fqdn(name)]
}

func (d *testDNS) serve(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	d.mu.Lock()
	for _, q := range req.Question {
		d.asks[q.Name]++
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 0}
		switch q.Qtype {
		case dns.TypeA:
			for _, ip := range d.a[q.Name] {
				hdr.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.ParseIP(ip)})
			}
		case dns.TypeSRV:
			for _, r := range d.srv[q.Name] {
				hdr.Rrtype = dns.TypeSRV
				r.Hdr = hdr
				m.Answer = append(m.Answer, &r)
			}
		}
		if _, ok := d.a[q.Name]; !ok && d.srv[q.Name] == nil {
			m.Rcode = dns.RcodeNameError
		}
	}
	d.mu.Unlock()
	w.WriteMsg(m)
}

func TestResolveForms(t *testing.T) {
	d := startDNS(t)
	d.setA("nodes.bank.test", "10.0.0.1", "10.0.0.2")
	d.setSRV("_gossip._tcp.bank.test", "a1.bank.test:7946", "b1.bank.test:7947")
	got, err := Resolve(context.Background(), d.Resolver, []string{
		"10.9.9.9:1", "dns+nodes.bank.test.:8558", "dnssrv+_gossip._tcp.bank.test.", "10.0.0.1:8558", "",
	})
	if err != nil {
		t.Fatal(err)
	}
	// SRV answers come in an order the resolver shuffles by weight.
	want := []string{"10.9.9.9:1", "10.0.0.1:8558", "10.0.0.2:8558", "127.0.0.1:7946", "127.0.0.1:7947"}
	if len(got) != len(want) || !slices.Equal(got[:3], want[:3]) || !slices.Equal(slices.Sorted(slices.Values(got[3:])), want[3:]) {
		t.Errorf("Resolve = %v, want %v (the SRV targets in any order, without the duplicate)", got, want)
	}

	// A name that does not resolve is reported, and the others still come back.
	got, err = Resolve(context.Background(), d.Resolver, []string{"dns+missing.bank.test.:1", "dns+nodes.bank.test.:2"})
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !strings.Contains(err.Error(), "missing.bank.test") {
		t.Errorf("error = %v, want a *net.DNSError naming missing.bank.test", err)
	}
	if want := []string{"10.0.0.1:2", "10.0.0.2:2"}; !slices.Equal(got, want) {
		t.Errorf("with one missing name: %v, want %v", got, want)
	}
}

func TestBadAddressesAreRefusedAtStart(t *testing.T) {
	for _, bad := range []string{"nohost", "dns+name", "dns+name:0", "dnssrv+", "dnssrv+_x._tcp.name:7946", "host:99999"} {
		cfg := DefaultLocalConfig()
		cfg.Name, cfg.Group, cfg.Seeds = "n", "g", []string{bad}
		if _, err := Start(cfg); !errors.Is(err, ErrBadAddress) {
			t.Errorf("Seeds %q: Start error = %v, want ErrBadAddress", bad, err)
		}
		if _, err := Follow(FollowConfig{Nodes: []string{bad}}); !errors.Is(err, ErrBadAddress) {
			t.Errorf("Nodes %q: Follow error = %v, want ErrBadAddress", bad, err)
		}
	}
}

// A node whose seed is an SRV name that has no records yet keeps asking
// DNS, and joins the node the name points to once it does.
func TestDNSSeedsAreResolvedAgainUntilTheyJoin(t *testing.T) {
	d := startDNS(t)
	const name = "_gossip._tcp.bank.test."
	a := startNode(t, "a", "g0")
	b := startNode(t, "b", "g1", func(cfg *Config) {
		cfg.Seeds = []string{"dnssrv+" + name}
		cfg.Resolver = d.Resolver
	})
	testkit.Until(t, "two lookups of the SRV name while it has no records", func() bool { return d.asked(name) >= 2 })
	if b.Joined() {
		t.Fatal("b joined while DNS named no seed")
	}
	var dnsErr *net.DNSError
	if err := b.JoinErr(); !errors.As(err, &dnsErr) {
		t.Errorf("JoinErr() = %v, want the DNS error", err)
	}

	_, port, _ := net.SplitHostPort(a.localAddr())
	d.setSRV(name, "a.bank.test:"+port)
	select {
	case <-b.JoinedChan():
	case <-time.After(detectBound):
		t.Fatalf("b did not join once DNS named a; last error: %v", b.JoinErr())
	}
	testkit.Until(t, "a sees b", func() bool { return len(a.Members()) == 2 })
}

// The first node behind a name that lists only itself waits to be joined
// instead of starting a cluster of its own.
func TestDNSSeedsNamingOnlyThisNodeWait(t *testing.T) {
	d := startDNS(t)
	port := testkit.FreePorts(t, 1)[0]
	d.setA("self.bank.test", "127.0.0.1")
	a := startNode(t, "a", "g0", func(cfg *Config) {
		cfg.BindPort = port
		cfg.Seeds = []string{"dns+self.bank.test.:" + strconv.Itoa(port)}
		cfg.Resolver = d.Resolver
	})
	testkit.Until(t, "a join error", func() bool { return a.JoinErr() != nil })
	if a.Joined() || !strings.Contains(a.JoinErr().Error(), "no node but this one") {
		t.Fatalf("Joined() = %v, JoinErr() = %v; want waiting, saying the seeds name only this node", a.Joined(), a.JoinErr())
	}
	b := startNode(t, "b", "g1", seeds(a))
	select {
	case <-b.JoinedChan():
	case <-time.After(detectBound):
		t.Fatalf("b did not join a: %v", b.JoinErr())
	}
	testkit.Until(t, "a is joined by b", func() bool { return a.Joined() && len(a.Members()) == 2 })
}
