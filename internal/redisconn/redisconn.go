// Package redisconn opens the Redis client dtq runs on from one URL:
//
//	redis://[user:password@]host:port[/db][?opts]            one node
//	rediss://…                                                one node over TLS
//	redis+cluster://[user:password@]host:port?addr=h2:p2…     Redis Cluster (rediss+cluster for TLS)
//	redis+sentinel://[user:password@]host:port?master_name=M&addr=h2:p2…   Sentinel (rediss+sentinel)
//
// Query options are go-redis' (dial_timeout, read_timeout, pool_size, …). A CA file for
// TLS comes separately (DTQ_REDIS_CA_FILE), as URLs cannot carry one.
package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Options tune the client beyond the URL.
type Options struct {
	CAFile   string // PEM bundle trusted for rediss; "" means the system roots
	PoolSize int    // 0: go-redis' default
	Name     string // CLIENT SETNAME
	// DialAttempts bounds the dials of one new connection (0: go-redis' default of 5).
	// A command-line tool wants 1: its user reads the error rather than waits.
	DialAttempts int
	// HandshakeTimeout bounds the TLS handshake of a rediss:// connection, after its TCP
	// connect (0: the dial timeout, dial_timeout in the URL or go-redis' 5 s). A server
	// that does not speak TLS never answers the handshake: the error says so.
	HandshakeTimeout time.Duration
}

// CAFileError is an error of Options.CAFile; every other error of Open is the URL's.
type CAFileError struct{ Err error }

func (e *CAFileError) Error() string { return e.Err.Error() }
func (e *CAFileError) Unwrap() error { return e.Err }

// Variable names the environment variable an error of Open is about: DTQ_REDIS_CA_FILE
// for the CA file, DTQ_REDIS_URL for anything else.
func Variable(err error) string {
	var ce *CAFileError
	if errors.As(err, &ce) {
		return "DTQ_REDIS_CA_FILE"
	}
	return "DTQ_REDIS_URL"
}

// Open builds a client from rawURL. It does not dial: the first command does.
func Open(rawURL string, o Options) (redis.UniversalClient, error) {
	if rawURL == "" {
		return nil, errors.New("redis URL is empty")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis URL does not parse: %s", Redact(rawURL))
	}
	base, mode, ok := strings.Cut(u.Scheme, "+")
	if base != "redis" && base != "rediss" {
		return nil, fmt.Errorf("redis URL scheme %q: want redis, rediss, redis+cluster or redis+sentinel", u.Scheme)
	}
	if !ok {
		mode = ""
	}
	u.Scheme = base
	plain := u.String()
	var ca *x509.CertPool
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, &CAFileError{err}
		}
		ca = x509.NewCertPool()
		if !ca.AppendCertsFromPEM(pem) {
			return nil, &CAFileError{fmt.Errorf("%s holds no PEM certificate", o.CAFile)}
		}
	}
	tlsFix := func(c *tls.Config) {
		if c != nil && ca != nil {
			c.RootCAs = ca
		}
	}
	switch mode {
	case "":
		opt, err := redis.ParseURL(plain)
		if err != nil {
			return nil, fmt.Errorf("redis URL: %s", scrub(err, u))
		}
		lean(&opt.DisableIdentity, &opt.MaintNotificationsConfig)
		tlsFix(opt.TLSConfig)
		if o.PoolSize > 0 {
			opt.PoolSize = o.PoolSize
		}
		opt.ClientName = o.Name
		if o.DialAttempts > 0 && opt.DialerRetries == 0 {
			opt.DialerRetries = o.DialAttempts
		}
		if opt.TLSConfig != nil {
			opt.Dialer = tlsDialer(opt.TLSConfig, opt.DialTimeout, o.HandshakeTimeout)
		}
		return redis.NewClient(opt), nil
	case "cluster":
		opt, err := redis.ParseClusterURL(plain)
		if err != nil {
			return nil, fmt.Errorf("redis cluster URL: %s", scrub(err, u))
		}
		lean(&opt.DisableIdentity, &opt.MaintNotificationsConfig)
		tlsFix(opt.TLSConfig)
		if o.PoolSize > 0 {
			opt.PoolSize = o.PoolSize
		}
		opt.ClientName = o.Name
		if o.DialAttempts > 0 && opt.DialerRetries == 0 {
			opt.DialerRetries = o.DialAttempts
		}
		if opt.TLSConfig != nil {
			opt.Dialer = tlsDialer(opt.TLSConfig, opt.DialTimeout, o.HandshakeTimeout)
		}
		return redis.NewClusterClient(opt), nil
	case "sentinel":
		opt, err := redis.ParseFailoverURL(plain)
		if err != nil {
			return nil, fmt.Errorf("redis sentinel URL: %s", scrub(err, u))
		}
		if opt.MasterName == "" {
			return nil, errors.New("redis sentinel URL needs ?master_name=")
		}
		opt.DisableIdentity = true
		tlsFix(opt.TLSConfig)
		if o.PoolSize > 0 {
			opt.PoolSize = o.PoolSize
		}
		opt.ClientName = o.Name
		if o.DialAttempts > 0 && opt.DialerRetries == 0 {
			opt.DialerRetries = o.DialAttempts
		}
		if opt.TLSConfig != nil {
			opt.Dialer = tlsDialer(opt.TLSConfig, opt.DialTimeout, o.HandshakeTimeout)
		}
		return redis.NewFailoverClient(opt), nil
	default:
		return nil, fmt.Errorf("redis URL scheme %q: want redis, rediss, redis+cluster or redis+sentinel", u.Scheme+"+"+mode)
	}
}

// tlsDialer dials as go-redis does for TLS (the same TCP keep-alive, the dial timeout
// on the connect), but bounds the handshake by handshake (0: the dial timeout) and the
// caller's context, and names the likely cause when it fails: a rediss:// URL pointed at
// a Redis without TLS, which answers a ClientHello with silence or plain text.
func tlsDialer(cfg *tls.Config, dialTimeout, handshake time.Duration) func(context.Context, string, string) (net.Conn, error) {
	if dialTimeout == 0 {
		dialTimeout = 5 * time.Second // go-redis' default
	}
	if handshake == 0 {
		handshake = dialTimeout
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := &net.Dialer{Timeout: dialTimeout, KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}}
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg
		if c.ServerName == "" {
			c = cfg.Clone()
			if host, _, err := net.SplitHostPort(addr); err == nil {
				c.ServerName = host
			} else {
				c.ServerName = addr
			}
		}
		conn := tls.Client(raw, c)
		hctx := ctx
		if handshake > 0 {
			var cancel context.CancelFunc
			hctx, cancel = context.WithTimeout(ctx, handshake)
			defer cancel()
		}
		start := time.Now()
		if err := conn.HandshakeContext(hctx); err != nil {
			_ = raw.Close()
			var rh tls.RecordHeaderError
			var ne net.Error
			switch {
			case errors.As(err, &rh):
				return nil, fmt.Errorf("%s answered the TLS handshake in plain text: no TLS there (for a Redis without TLS use redis://, not rediss://)", addr)
			case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
				// Not wrapped: go-redis retries a command after a timeout, and this one
				// would time out again.
				return nil, fmt.Errorf("%s did not answer the TLS handshake in %s: a Redis without TLS? (then use redis://, not rediss://)",
					addr, time.Since(start).Round(100*time.Millisecond))
			}
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		return conn, nil
	}
}

// lean drops the connection handshake steps dtq does not use — CLIENT SETINFO (library
// identity) and CLIENT MAINT_NOTIFICATIONS (Redis Enterprise maintenance events) — so a
// new connection costs HELLO and one pipelined SETNAME: it matters to a worker's first
// task after a cold start.
func lean(disableIdentity *bool, maint **maintnotifications.Config) {
	*disableIdentity = true
	*maint = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// scrub removes the password of u from an error's text.
func scrub(err error, u *url.URL) string {
	s := err.Error()
	if u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			s = strings.ReplaceAll(s, p, "xxxxx")
		}
	}
	return s
}

// Redact returns rawURL with its password replaced, fit for logs and errors.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	// Without a scheme and a host, the user info is not where url.Parse looks for it
	// ("redis//u:pw@h" is a path, "#://u:pw@h" a fragment): show nothing of it.
	if err != nil || u.Scheme == "" || u.Opaque != "" || u.Host == "" {
		return "(unparsable URL)"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	u.Fragment, u.RawFragment = "", ""
	q := u.Query()
	for k := range q {
		if strings.Contains(strings.ToLower(k), "pass") {
			q.Set(k, "xxxxx")
		}
	}
	u.RawQuery = q.Encode()
	return u.Redacted()
}
