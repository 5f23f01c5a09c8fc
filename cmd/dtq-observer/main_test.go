package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/internal/syncbuf"
	"github.com/dtq/dtq/internal/testcert"
	"github.com/dtq/dtq/observer"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestHelpListsEveryVariable(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, envconfig.MapLookuper(nil), &out, &errb, nil); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, v := range observer.EnvVars() {
		if !strings.Contains(out.String(), v.Name) {
			t.Errorf("--help lacks %s", v.Name)
		}
	}
}

func TestBadEnvExits2WithOneLine(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, port, _ := net.SplitHostPort(busy.Addr().String())
	certs := testcert.New(t)
	for _, tc := range []struct {
		env map[string]string
		v   string
	}{
		{map[string]string{"PORT": "-1"}, "PORT"},
		{map[string]string{"PORT": port}, "PORT"}, // in use
		{map[string]string{"DTQ_OBSERVER_TOKEN": "tk7q"}, "DTQ_OBSERVER_TOKEN"},
		{map[string]string{"DTQ_OBSERVER_READ_OPEN": "false"}, "DTQ_OBSERVER_READ_OPEN"},
		{map[string]string{"DTQ_REDIS_URL": "http://x"}, "DTQ_REDIS_URL"},
		{map[string]string{"DTQ_REDIS_URL": "rediss://h:1", "DTQ_REDIS_CA_FILE": "/nonexistent"}, "DTQ_REDIS_CA_FILE"},
		{map[string]string{"DTQ_OBSERVER_TLS_CERT_FILE": certs.ServerCertFile}, "DTQ_OBSERVER_TLS_KEY_FILE"},
		{map[string]string{"DTQ_OBSERVER_TLS_KEY_FILE": certs.ServerKeyFile}, "DTQ_OBSERVER_TLS_CERT_FILE"},
		{map[string]string{"DTQ_OBSERVER_TLS_CERT_FILE": "/nonexistent", "DTQ_OBSERVER_TLS_KEY_FILE": certs.ServerKeyFile}, "DTQ_OBSERVER_TLS_CERT_FILE"},
		{map[string]string{"DTQ_OBSERVER_TLS_CERT_FILE": certs.ServerCertFile, "DTQ_OBSERVER_TLS_KEY_FILE": certs.CAFile, "PORT": "0"}, "DTQ_OBSERVER_TLS_CERT_FILE/DTQ_OBSERVER_TLS_KEY_FILE"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), nil, envconfig.MapLookuper(tc.env), &out, &errb, nil)
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		if code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "dtq observer: "+tc.v+": ") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line naming %s", tc.env, code, errb.String(), tc.v)
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--bogus"}, envconfig.MapLookuper(nil), &out, &errb, nil); code != 2 {
		t.Fatalf("unknown flag exit %d, want 2", code)
	}
}

func TestCheckRedactsSecrets(t *testing.T) {
	t.Parallel()
	const pw, tok = "s3cretpassw0rd", "the-observer-token-1234"
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--check"}, envconfig.MapLookuper(map[string]string{
		"DTQ_REDIS_URL": "redis://u:" + pw + "@127.0.0.1:1/0", "DTQ_OBSERVER_TOKEN": tok,
	}), &out, &errb, nil)
	if code != 0 || strings.Contains(out.String(), pw) || strings.Contains(out.String(), tok) || !strings.Contains(out.String(), "DTQ_OBSERVER_TOKEN=xxxxx") {
		t.Fatalf("exit %d:\n%s%s", code, out.String(), errb.String())
	}
}

// The command serves the API on PORT and stops cleanly when its context ends (SIGTERM).
func TestServesUntilStopped(t *testing.T) {
	t.Parallel()
	serveUntilStopped(t, false)
}

// With a key pair configured, the command serves HTTPS, and plain HTTP is refused.
func TestServesHTTPS(t *testing.T) {
	t.Parallel()
	serveUntilStopped(t, true)
}

func serveUntilStopped(t *testing.T, useTLS bool) {
	srv := redistest.Shared(t)
	env := map[string]string{
		"DTQ_REDIS_URL": srv.URL(), "DTQ_KEY_PREFIX": redistest.Prefix(t), "PORT": "0", "DTQ_LOG_FORMAT": "json",
	}
	hc, scheme := http.DefaultClient, "http"
	if useTLS {
		certs := testcert.New(t)
		env["DTQ_OBSERVER_TLS_CERT_FILE"], env["DTQ_OBSERVER_TLS_KEY_FILE"] = certs.ServerCertFile, certs.ServerKeyFile
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM([]byte(certs.CAPEM))
		hc, scheme = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}, "https"
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := make(chan string, 1)
	done := make(chan int, 1)
	var log syncbuf.Buffer
	go func() {
		done <- run(ctx, nil, envconfig.MapLookuper(env), io.Discard, &log, func(a string) { addr <- a })
	}()
	var base string
	select {
	case a := <-addr:
		_, port, _ := net.SplitHostPort(a)
		base = scheme + "://127.0.0.1:" + port
	case code := <-done:
		t.Fatalf("exit %d before serving:\n%s", code, log.String())
	}
	for _, p := range []string{"/healthz", "/readyz", "/api/v1/queues", "/api/v1/workers"} {
		res, err := hc.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", p, res.StatusCode)
		}
	}
	if useTLS {
		// Go's TLS server answers a plain request 400 without serving it.
		res, err := http.Get("http" + strings.TrimPrefix(base, "https") + "/api/v1/queues")
		if err == nil {
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusBadRequest || strings.Contains(string(body), "queues") {
				t.Fatalf("plain HTTP to the HTTPS port: %d %s", res.StatusCode, body)
			}
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, log.String())
	}
	if !strings.Contains(log.String(), `"msg":"observer: stopped"`) {
		t.Fatalf("log:\n%s", log.String())
	}
}

// The observer runs the stale watcher (its WORKER_STALE comes on an event stream) and,
// stopped, ends its open event streams rather than wait for them.
func TestStaleWatcherAndStreamsUntilStopped(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	prefix := redistest.Prefix(t)
	rdb := srv.Client(t)
	// a worker id whose record expired
	if err := rdb.SAdd(context.Background(), prefix+":workers", "w-gone").Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := make(chan string, 1)
	done := make(chan int, 1)
	var log syncbuf.Buffer
	go func() {
		done <- run(ctx, nil, envconfig.MapLookuper(map[string]string{
			"DTQ_REDIS_URL": srv.URL(), "DTQ_KEY_PREFIX": prefix, "PORT": "0", "DTQ_LOG_FORMAT": "json",
			"DTQ_OBSERVER_STALE_CHECK_S": "0.05",
		}), io.Discard, &log, func(a string) { addr <- a })
	}()
	var base string
	select {
	case a := <-addr:
		_, port, _ := net.SplitHostPort(a)
		base = "http://127.0.0.1:" + port
	case code := <-done:
		t.Fatalf("exit %d before serving:\n%s", code, log.String())
	}
	res, err := http.Get(base + "/api/v1/events?after=0")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("events: %d", res.StatusCode)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		r := bufio.NewReader(res.Body)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines <- strings.TrimSuffix(l, "\n")
		}
	}()
	for l := range lines {
		if l == "event: WORKER_STALE" {
			break
		}
	}
	cancel()
	var said bool
	for l := range lines { // the stream ends
		said = said || strings.Contains(l, "the observer is stopping")
	}
	if !said {
		t.Error("the stream ended without saying why")
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, log.String())
	}
	if !strings.Contains(log.String(), "WORKER_STALE published") {
		t.Fatalf("log:\n%s", log.String())
	}
}
