package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeCert writes a self-signed CA certificate and its key as PEM files.
func writeCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "node"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
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

func TestServerTLS(t *testing.T) {
	cert, key := writeCert(t)
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
	cert, key := writeCert(t)
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
