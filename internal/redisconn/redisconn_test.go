package redisconn

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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

// An error of the CA file names DTQ_REDIS_CA_FILE, one of the URL DTQ_REDIS_URL.
func TestErrorsNameTheirVariable(t *testing.T) {
	t.Parallel()
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		url, ca, want string
	}{
		{"rediss://h:1", "/nonexistent/ca.pem", "DTQ_REDIS_CA_FILE"},
		{"rediss://h:1", notPEM, "DTQ_REDIS_CA_FILE"},
		{"redis+cluster://h:1?addr=h:2", notPEM, "DTQ_REDIS_CA_FILE"},
		{"mysql://h:1", "", "DTQ_REDIS_URL"},
		{"redis://h:1/notadb", "", "DTQ_REDIS_URL"},
	} {
		_, err := Open(c.url, Options{CAFile: c.ca})
		if err == nil || Variable(err) != c.want {
			t.Errorf("Open(%q, CA %q): %v names %s, want %s", c.url, c.ca, err, Variable(err), c.want)
		}
	}
}

// serve accepts connections and hands each to fn; it stops when the test ends.
func serve(t *testing.T, fn func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); fn(c) }()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// rediss:// at a server without TLS fails on the first dial with an error that says
// so, whether the server stays silent (Redis waits for the end of a line that never
// comes) or answers in plain text.
func TestRedissAtAPlainServerSaysSo(t *testing.T) {
	t.Parallel()
	silent := serve(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	plain := serve(t, func(c net.Conn) {
		_, _ = c.Write([]byte("-ERR unknown command\r\n"))
		_, _ = io.Copy(io.Discard, c)
	})
	for _, c := range []struct{ addr, want string }{
		{silent, "did not answer the TLS handshake"},
		{plain, "answered the TLS handshake in plain text"},
	} {
		rdb, err := Open("rediss://"+c.addr, Options{DialAttempts: 1, HandshakeTimeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		err = rdb.Ping(context.Background()).Err()
		_ = rdb.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "use redis://") {
			t.Errorf("rediss:// at %s: %v; want an error saying %q and suggesting redis://", c.addr, err, c.want)
		}
	}
}
