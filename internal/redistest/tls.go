package redistest

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
	"strconv"
	"strings"
	"testing"
	"time"
)

// TLSServer is a redis-server that speaks TLS on TLSPort, with a certificate signed by a
// CA made for the test (CAFile). Its plain port (Server.Port, 127.0.0.1 only) stays open
// for the test's own checks and administration.
type TLSServer struct {
	*Server
	TLSPort int
	CAFile  string // PEM of the CA: what DTQ_REDIS_CA_FILE points at
}

// TLSAddr is host:port of the TLS listener.
func (s *TLSServer) TLSAddr() string { return "127.0.0.1:" + strconv.Itoa(s.TLSPort) }

// TLSURL is the rediss:// URL of the server, with user and password when user is not "".
func (s *TLSServer) TLSURL(user, password string) string {
	auth := ""
	if user != "" || password != "" {
		auth = user + ":" + password + "@"
	}
	return "rediss://" + auth + s.TLSAddr()
}

// StartTLS starts a dedicated redis-server with TLS (redis-server must be built with
// it, as Debian's is) and stops it when t ends. o.Args are passed on, e.g. ACLUser.
func StartTLS(t testing.TB, o Options) *TLSServer {
	t.Helper()
	dir := t.TempDir()
	ca, cert, key, err := writeCerts(dir)
	if err != nil {
		t.Fatalf("redistest: certificates: %v", err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	o.Args = append([]string{"--tls-port", strconv.Itoa(port), "--tls-cert-file", cert, "--tls-key-file", key,
		"--tls-ca-cert-file", ca, "--tls-auth-clients", "no"}, o.Args...)
	s, err := start(dir, o)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Stop)
	return &TLSServer{Server: s, TLSPort: port, CAFile: ca}
}

// ACLUser returns the redis-server arguments that define one ACL user from a line of
// the form of redis.conf and ACL SETUSER: "user NAME rule rule …" ("user" optional).
func ACLUser(line string) []string {
	f := strings.Fields(line)
	if len(f) > 0 && f[0] == "user" {
		f = f[1:]
	}
	return append([]string{"--user"}, f...)
}

// writeCerts makes a CA and a server certificate for 127.0.0.1 and localhost, and
// writes ca.pem, server.pem and server.key to dir.
func writeCerts(dir string) (ca, cert, key string, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dtq test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", "", "", err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return "", "", "", err
	}
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	for _, f := range []struct {
		name, typ string
		der       []byte
	}{{ca, "CERTIFICATE", caDER}, {cert, "CERTIFICATE", srvDER}, {key, "EC PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.name, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return "", "", "", err
		}
	}
	return ca, cert, key, nil
}
