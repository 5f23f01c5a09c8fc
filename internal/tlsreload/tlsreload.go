// Package tlsreload builds a server's TLS configuration from PEM files that are read
// again when they change, so a certificate rotated by cert-manager or a mounted Secret
// is picked up without a restart. The scaler's gRPC server and the observer share it.
package tlsreload

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"
)

// Server builds a server's TLS configuration (TLS 1.2 at least) offering nextProtos. The
// key pair (and the client CA bundle, for mTLS; "" for none) are read again when their
// files change.
func Server(certFile, keyFile, clientCAFile string, nextProtos ...string) (*tls.Config, error) {
	r := &tlsFiles{cert: certFile, key: keyFile, ca: clientCAFile}
	if _, err := r.load(); err != nil {
		return nil, err
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		st, err := r.load()
		if err != nil {
			return nil, err
		}
		c := base.Clone()
		c.GetConfigForClient = nil
		c.Certificates = []tls.Certificate{st.pair}
		if st.pool != nil {
			c.ClientCAs = st.pool
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
		return c, nil
	}
	return base, nil
}

type tlsFiles struct {
	cert, key, ca string

	mu      sync.Mutex
	stamp   string
	checked time.Time
	cur     tlsState
}

type tlsState struct {
	pair tls.Certificate
	pool *x509.CertPool
}

// load returns the current key pair and client CA pool, re-reading the files when
// their modification times changed (checked at most once a second).
func (r *tlsFiles) load() (tlsState, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stamp != "" && time.Since(r.checked) < time.Second {
		return r.cur, nil
	}
	stamp := ""
	for _, f := range []string{r.cert, r.key, r.ca} {
		if f == "" {
			continue
		}
		fi, err := os.Stat(f)
		if err != nil {
			if r.stamp != "" {
				return r.cur, nil // a rotation in progress: keep serving the last good pair
			}
			return tlsState{}, fmt.Errorf("TLS: %w", err)
		}
		stamp += fi.ModTime().String() + fmt.Sprint(fi.Size()) + ";"
	}
	r.checked = time.Now()
	if stamp == r.stamp {
		return r.cur, nil
	}
	pair, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		if r.stamp != "" {
			return r.cur, nil
		}
		return tlsState{}, fmt.Errorf("TLS key pair: %w", err)
	}
	st := tlsState{pair: pair}
	if r.ca != "" {
		pem, err := os.ReadFile(r.ca)
		if err != nil {
			return tlsState{}, fmt.Errorf("TLS client CA: %w", err)
		}
		st.pool = x509.NewCertPool()
		if !st.pool.AppendCertsFromPEM(pem) {
			if r.stamp != "" {
				return r.cur, nil
			}
			return tlsState{}, fmt.Errorf("TLS client CA %s holds no PEM certificate", r.ca)
		}
	}
	r.cur, r.stamp = st, stamp
	return st, nil
}
