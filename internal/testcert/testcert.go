// Package testcert makes a throwaway CA, a server certificate for 127.0.0.1 and
// localhost, and a client certificate, for tests of TLS and mTLS servers (the
// scaler's, the observer's).
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Set is one CA with a server and a client certificate, as PEM text and as files.
type Set struct {
	CAPEM, ServerCertPEM, ServerKeyPEM, ClientCertPEM, ClientKeyPEM      string
	CAFile, ServerCertFile, ServerKeyFile, ClientCertFile, ClientKeyFile string
}

// New writes a fresh Set into a temporary directory of t.
func New(t testing.TB) Set {
	t.Helper()
	dir := t.TempDir()
	caKey := key(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dtq test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage) (string, string) {
		k := key(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return encode("CERTIFICATE", der), encode("EC PRIVATE KEY", kd)
	}
	var s Set
	s.CAPEM = encode("CERTIFICATE", caDER)
	s.ServerCertPEM, s.ServerKeyPEM = leaf(2, "dtq-scaler", x509.ExtKeyUsageServerAuth)
	s.ClientCertPEM, s.ClientKeyPEM = leaf(3, "keda-operator", x509.ExtKeyUsageClientAuth)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	s.CAFile = write("ca.pem", s.CAPEM)
	s.ServerCertFile = write("server.pem", s.ServerCertPEM)
	s.ServerKeyFile = write("server-key.pem", s.ServerKeyPEM)
	s.ClientCertFile = write("client.pem", s.ClientCertPEM)
	s.ClientKeyFile = write("client-key.pem", s.ClientKeyPEM)
	return s
}

func key(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func encode(typ string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}
