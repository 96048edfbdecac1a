package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ServerTLS loads a node's certificate and key; with clientCA set, the node
// requires client certificates issued by it (mutual TLS). No certificate and
// no key: nil, plaintext.
func ServerTLS(certFile, keyFile, clientCA string) (*tls.Config, error) {
	if certFile == "" && keyFile == "" {
		if clientCA != "" {
			return nil, errors.New("-rpc-tls-ca needs -rpc-tls-cert and -rpc-tls-key")
		}
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("-rpc-tls-cert/-rpc-tls-key: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}}
	if clientCA != "" {
		if c.ClientCAs, err = certPool(clientCA); err != nil {
			return nil, err
		}
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// ClientTLS trusts the nodes whose certificates ca issued and, with a
// certificate and key, presents them for mutual TLS. No ca: nil, plaintext.
func ClientTLS(ca, certFile, keyFile string) (*tls.Config, error) {
	if ca == "" {
		if certFile != "" || keyFile != "" {
			return nil, errors.New("-rpc-tls-cert and -rpc-tls-key need -rpc-tls-ca")
		}
		return nil, nil
	}
	pool, err := certPool(ca)
	if err != nil {
		return nil, err
	}
	c := &tls.Config{RootCAs: pool}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("-rpc-tls-cert/-rpc-tls-key: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

func certPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("-rpc-tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("-rpc-tls-ca: no PEM certificate in %s", file)
	}
	return pool, nil
}
