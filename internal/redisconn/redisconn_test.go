package redisconn

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestOpenForms(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url  string
		kind string
	}{
		{"redis://127.0.0.1:6379/0", "*redis.Client"},
		{"rediss://u:p@example.com:6380/1", "*redis.Client"},
		{"redis+cluster://h1:7000?addr=h2:7001", "*redis.ClusterClient"},
		{"redis+sentinel://h1:26379?master_name=m&addr=h2:26379", "*redis.Client"},
	} {
		c2, err := Open(c.url, Options{})
		if err != nil {
			t.Errorf("Open(%q): %v", c.url, err)
			continue
		}
		switch c2.(type) {
		case *redis.Client:
			if c.kind != "*redis.Client" {
				t.Errorf("Open(%q) gave a single-node client", c.url)
			}
		case *redis.ClusterClient:
			if c.kind != "*redis.ClusterClient" {
				t.Errorf("Open(%q) gave a cluster client", c.url)
			}
		}
		_ = c2.Close()
	}
}

func TestOpenErrorsHideThePassword(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"http://user:s3cr3t-pw@host:1",
		"redis://user:s3cr3t-pw@host:1/notadb",
		"redis://user:s3cr3t-pw@host:1/0?bogus_option=1",
		"redis+sentinel://user:s3cr3t-pw@host:1",
		"redis+nope://user:s3cr3t-pw@host:1",
		"",
	} {
		_, err := Open(u, Options{})
		if err == nil {
			t.Errorf("Open(%q) succeeded", u)
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t-pw") {
			t.Errorf("Open error leaks the password: %v", err)
		}
	}
	if r := Redact("redis://user:s3cr3t-pw@host:1/0"); strings.Contains(r, "s3cr3t-pw") || !strings.Contains(r, "user") {
		t.Errorf("Redact = %q", r)
	}
	if _, err := Open("rediss://h:1", Options{CAFile: "/nonexistent/ca.pem"}); err == nil {
		t.Error("a missing CA file was accepted")
	}
}
