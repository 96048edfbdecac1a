package cli

import (
	"crypto/tls"
	"strings"
	"testing"

	"github.com/ffgen/ffgen/internal/testkit"
)

func TestServerTLS(t *testing.T) {
	cert, key := testkit.WritePEM(t, testkit.SelfSigned(t))
	if c, err := ServerTLS("", "", ""); c != nil || err != nil {
		t.Errorf("no files: %v, %v; want plaintext", c, err)
	}
	c, err := ServerTLS(cert, key, "")
	if err != nil || len(c.Certificates) != 1 || c.ClientAuth != tls.NoClientCert {
		t.Fatalf("certificate and key: %+v, %v", c, err)
	}
	c, err = ServerTLS(cert, key, cert)
	if err != nil || c.ClientAuth != tls.RequireAndVerifyClientCert || c.ClientCAs == nil {
		t.Fatalf("with a client CA: %+v, %v; want mutual TLS", c, err)
	}
	if _, err := ServerTLS("", "", cert); err == nil || !strings.Contains(err.Error(), "-rpc-tls-cert") {
		t.Errorf("a CA alone: %v, want an error naming the missing flags", err)
	}
	if _, err := ServerTLS(cert, "", ""); err == nil {
		t.Error("a certificate without its key was accepted")
	}
	if _, err := ServerTLS(cert, key, key); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a key as the CA: %v, want no PEM certificate", err)
	}
}

func TestClientTLS(t *testing.T) {
	cert, key := testkit.WritePEM(t, testkit.SelfSigned(t))
	if c, err := ClientTLS("", "", ""); c != nil || err != nil {
		t.Errorf("no files: %v, %v; want plaintext", c, err)
	}
	c, err := ClientTLS(cert, "", "")
	if err != nil || c.RootCAs == nil || len(c.Certificates) != 0 {
		t.Fatalf("a CA: %+v, %v", c, err)
	}
	c, err = ClientTLS(cert, cert, key)
	if err != nil || len(c.Certificates) != 1 {
		t.Fatalf("a CA and a client certificate: %+v, %v", c, err)
	}
	if _, err := ClientTLS("", cert, key); err == nil || !strings.Contains(err.Error(), "-rpc-tls-ca") {
		t.Errorf("a client certificate without a CA: %v, want an error naming -rpc-tls-ca", err)
	}
}
