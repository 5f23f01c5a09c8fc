package tlsreload_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dtq/dtq/internal/testcert"
	"github.com/dtq/dtq/internal/tlsreload"
)

// serve accepts TLS connections on a local port with cfg, completing each handshake.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// dial reports whether a client trusting caPEM completes a handshake with addr.
func dial(addr, caPEM string) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		return errors.New("bad CA")
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		return err
	}
	return c.Close()
}

func TestRotatedKeyPairIsServedWithoutARestart(t *testing.T) {
	a, b := testcert.New(t), testcert.New(t)
	cfg, err := tlsreload.Server(a.ServerCertFile, a.ServerKeyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	if err := dial(addr, a.CAPEM); err != nil {
		t.Fatalf("first pair: %v", err)
	}
	if dial(addr, b.CAPEM) == nil {
		t.Fatal("a client trusting another CA was accepted")
	}

	// A rotation in progress (the key file gone) keeps the last good pair.
	if err := os.Remove(a.ServerKeyFile); err != nil {
		t.Fatal(err)
	}
	if err := dial(addr, a.CAPEM); err != nil {
		t.Fatalf("key file missing: the last good pair was not kept: %v", err)
	}

	// The new pair lands in the same files: served once the files' stamps change (checked
	// at most once a second).
	later := time.Now().Add(5 * time.Second)
	for _, f := range []struct{ path, pem string }{{a.ServerCertFile, b.ServerCertPEM}, {a.ServerKeyFile, b.ServerKeyPEM}} {
		if err := os.WriteFile(f.path, []byte(f.pem), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f.path, later, later); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for dial(addr, b.CAPEM) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the rotated pair was never served")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if dial(addr, a.CAPEM) == nil {
		t.Error("the old pair is still served after the rotation")
	}
}

func TestBadFilesAreRefusedAtStart(t *testing.T) {
	s := testcert.New(t)
	for name, files := range map[string][3]string{
		"missing cert":      {s.ServerCertFile + ".none", s.ServerKeyFile, ""},
		"cert as key":       {s.ServerCertFile, s.CAFile, ""},
		"client CA not PEM": {s.ServerCertFile, s.ServerKeyFile, s.ServerKeyFile},
	} {
		if _, err := tlsreload.Server(files[0], files[1], files[2]); err == nil || !strings.Contains(err.Error(), "TLS") {
			t.Errorf("%s: got %v, want a TLS error", name, err)
		}
	}
}
