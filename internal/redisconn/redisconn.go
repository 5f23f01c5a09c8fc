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
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Options tune the client beyond the URL.
type Options struct {
	CAFile   string // PEM bundle trusted for rediss; "" means the system roots
	PoolSize int    // 0: go-redis' default
	Name     string // CLIENT SETNAME
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
			return nil, fmt.Errorf("redis CA file: %w", err)
		}
		ca = x509.NewCertPool()
		if !ca.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis CA file %s holds no PEM certificate", o.CAFile)
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
		return redis.NewFailoverClient(opt), nil
	default:
		return nil, fmt.Errorf("redis URL scheme %q: want redis, rediss, redis+cluster or redis+sentinel", u.Scheme+"+"+mode)
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
