package redisconn_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/dtq/dtq/internal/redisconn"
)

// A Redis URL carries the password: neither Redact nor any error of Open may show it,
// in clear or URL-encoded, whatever else the URL holds.
func FuzzRedactAndOpen(f *testing.F) {
	f.Add("redis", "dtq", "s3cret", "127.0.0.1:6379", "/0", "")
	f.Add("rediss+cluster", "", "p@ss:w/rd", "h1:1", "", "addr=h2:2&bogus=1")
	f.Add("redis+sentinel", "u", "pw%zz", "[::1", "/x", "master_name=")
	f.Add("redis", "u", "secret", "host:notaport", "/99999999999999999999", "dial_timeout=forever")
	f.Add("http", "u", "secret", "h", "", "")
	f.Fuzz(func(t *testing.T, scheme, user, password, host, path, query string) {
		// The password starts with a marker nothing else in the URL holds: any trace of
		// the marker in the output is the password showing.
		const marker = "Zq9"
		if strings.Contains(strings.ToLower(scheme+user+host+path+query), strings.ToLower(marker)) {
			return
		}
		password = marker + password
		raw := scheme + "://" + url.UserPassword(user, password).String() + "@" + host + path
		if query != "" {
			raw += "?" + query
		}
		check := func(what, s string) {
			if strings.Contains(strings.ToLower(s), strings.ToLower(marker)) {
				t.Fatalf("%s shows the password of %q: %s", what, raw, s)
			}
		}
		check("Redact", redisconn.Redact(raw))
		c, err := redisconn.Open(raw, redisconn.Options{})
		if err != nil {
			check("Open error", err.Error())
			return
		}
		_ = c.Close()
	})
}
