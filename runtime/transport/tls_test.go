package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
	"testing"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/testkit"
)

// echoOnce sends a frame on c and waits for the echo.
func echoOnce(t *testing.T, c Conn, cli *recorder) {
	t.Helper()
	if err := c.Send(&frame.Cancel{Call: 77}); err != nil {
		t.Fatal(err)
	}
	if got := cli.next(t).f.(*frame.Cancel).Call; got != 77 {
		t.Fatalf("echo %d, want 77", got)
	}
}

func tlsState(t *testing.T, c Conn) tls.ConnectionState {
	t.Helper()
	tc, ok := c.(*stream).nc.(*tls.Conn)
	if !ok {
		t.Fatalf("connection is %T, not TLS", c.(*stream).nc)
	}
	return tc.ConnectionState()
}

func TestTLSRoundTrip(t *testing.T) {
	ca := testkit.NewCA(t, "ca")
	srv := newRecorder()
	srv.echo = true
	l := listen(t, newTCP(t, "server", func(c *TCPConfig) {
		c.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "server")}}
	}), srv)
	cli := newRecorder()
	c := dial(t, newTCP(t, "client", func(c *TCPConfig) {
		c.ClientTLS = &tls.Config{RootCAs: ca.Pool}
	}), l.Addr(), cli)
	echoOnce(t, c, cli)
	if v := tlsState(t, c).Version; v != tls.VersionTLS13 {
		t.Errorf("TLS version %x, want 1.3", v)
	}
}

func mtlsServer(t *testing.T, ca *testkit.CA, log *testkit.LogBuffer) (Listener, *recorder) {
	t.Helper()
	srv := newRecorder()
	srv.echo = true
	l := listen(t, newTCP(t, "server", func(c *TCPConfig) {
		c.TLS = &tls.Config{
			Certificates: []tls.Certificate{ca.Issue(t, "server")},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    ca.Pool,
		}
		c.Logger = log.Logger()
	}), srv)
	return l, srv
}

func TestMutualTLS(t *testing.T) {
	ca := testkit.NewCA(t, "ca")
	var log testkit.LogBuffer
	l, srv := mtlsServer(t, ca, &log)
	cli := newRecorder()
	c := dial(t, newTCP(t, "client", func(c *TCPConfig) {
		c.ClientTLS = &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{ca.Issue(t, "client-7")}}
	}), l.Addr(), cli)
	echoOnce(t, c, cli)
	server := srv.next(t).c
	if certs := tlsState(t, server).PeerCertificates; len(certs) == 0 || certs[0].Subject.CommonName != "client-7" {
		t.Errorf("server sees client certificates %v", certs)
	}
}

func TestMutualTLSRefusesWrongCertificate(t *testing.T) {
	ca := testkit.NewCA(t, "ca")
	other := testkit.NewCA(t, "other-ca")
	tests := []struct {
		name    string
		certs   []tls.Certificate
		wantErr string // in the client's error
		wantLog string // in the server's log
	}{
		{"certificate from another CA", []tls.Certificate{other.Issue(t, "intruder")}, "unknown certificate authority", "x509: certificate signed by unknown authority"},
		{"no certificate", nil, "certificate required", "didn't provide a certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log testkit.LogBuffer
			l, _ := mtlsServer(t, ca, &log)
			tr := newTCP(t, "client", func(c *TCPConfig) {
				c.ClientTLS = &tls.Config{
					RootCAs: ca.Pool,
					// Present the certificate even though the server's list of
					// acceptable CAs does not name its issuer.
					GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
						if len(tt.certs) == 0 {
							return &tls.Certificate{}, nil
						}
						return &tt.certs[0], nil
					},
				}
			})
			c, err := tr.Dial(context.Background(), l.Addr(), newRecorder())
			if err == nil {
				c.Close()
				t.Fatal("Dial with a wrong client certificate succeeded")
			}
			if !errors.Is(err, ErrTLS) || errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Dial error %q, want ErrTLS (not ErrRefused) mentioning %q", err, tt.wantErr)
			}
			log.WaitFor(t, "TLS handshake failed")
			log.WaitFor(t, tt.wantLog)
		})
	}
}

func TestTLSClientDistrustsServer(t *testing.T) {
	ca := testkit.NewCA(t, "ca")
	other := testkit.NewCA(t, "other-ca")
	l := listen(t, newTCP(t, "server", func(c *TCPConfig) {
		c.TLS = &tls.Config{Certificates: []tls.Certificate{other.Issue(t, "impostor")}}
	}), newRecorder())
	_, err := newTCP(t, "client", func(c *TCPConfig) {
		c.ClientTLS = &tls.Config{RootCAs: ca.Pool}
	}).Dial(context.Background(), l.Addr(), newRecorder())
	var unknown x509.UnknownAuthorityError
	if !errors.Is(err, ErrTLS) || !errors.As(err, &unknown) {
		t.Errorf("Dial to an untrusted server: %v, want ErrTLS and x509.UnknownAuthorityError", err)
	}
}

func TestTLSRefusesOldVersions(t *testing.T) {
	ca := testkit.NewCA(t, "ca")
	var log testkit.LogBuffer
	l := listen(t, newTCP(t, "server", func(c *TCPConfig) {
		c.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "server")}, MinVersion: tls.VersionTLS12}
		c.Logger = log.Logger()
	}), newRecorder())
	// A plain TLS 1.2 client: the server insists on 1.3 whatever it was given.
	tc, err := tls.Dial("tcp", l.Addr(), &tls.Config{RootCAs: ca.Pool, MaxVersion: tls.VersionTLS12})
	if err == nil {
		tc.Close()
		t.Fatal("TLS 1.2 handshake succeeded")
	}
	log.WaitFor(t, "TLS handshake failed")

	// And the transport's own client will not offer less than 1.3.
	_, err = newTCP(t, "client", func(c *TCPConfig) {
		c.ClientTLS = &tls.Config{RootCAs: ca.Pool, MaxVersion: tls.VersionTLS12}
	}).Dial(context.Background(), l.Addr(), newRecorder())
	if !errors.Is(err, ErrTLS) {
		t.Errorf("Dial with MaxVersion 1.2: %v, want ErrTLS", err)
	}
}

func TestNewTCPRejectsTLSWithoutCertificate(t *testing.T) {
	if _, err := NewTCP(TCPConfig{TLS: &tls.Config{}}); err == nil {
		t.Error("NewTCP accepted a server TLS config without a certificate")
	}
}
