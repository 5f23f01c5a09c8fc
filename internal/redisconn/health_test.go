package redisconn_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/redisconn"
	"github.com/dtq/dtq/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func open(t *testing.T, url string, o redisconn.Options) redis.UniversalClient {
	t.Helper()
	c, err := redisconn.Open(url, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func short() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

// Classify sorts what real Redis servers answer: refusals no wait heals, replies
// about the command itself, and failures to reach a server that can serve.
func TestClassifyRealReplies(t *testing.T) {
	t.Parallel()
	pw := "pw-" + redistest.Prefix(t)
	args := []string{"--requirepass", pw}
	args = append(args, redistest.ACLUser("user nokeys on >u1pass ~other:* resetchannels +@all")...)
	args = append(args, redistest.ACLUser("user noset on >u2pass ~* resetchannels +@all -set")...)
	srv := redistest.Start(t, redistest.Options{Args: args})
	good := "redis://:" + pw + "@" + srv.Addr()
	admin := open(t, good, redisconn.Options{})
	replica := redistest.Start(t, redistest.Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(srv.Port), "--masterauth", pw}})
	tlsSrv := redistest.StartTLS(t, redistest.Options{})
	ctx, cancel := short()
	defer cancel()

	_ = admin.Set(ctx, "str", "x", 0).Err()
	closed := open(t, good, redisconn.Options{})
	_ = closed.Close()
	down := redistest.Start(t, redistest.Options{})
	down.Kill()

	for _, c := range []struct {
		name  string
		err   func() error
		class redisconn.Class
		cause string
	}{
		{"ok", func() error { return admin.Ping(ctx).Err() }, redisconn.Answered, ""},
		{"nil reply", func() error { return admin.Get(ctx, "missing").Err() }, redisconn.Answered, ""},
		{"WRONGTYPE", func() error { return admin.HGet(ctx, "str", "f").Err() }, redisconn.Answered, ""},
		{"NOGROUP", func() error {
			return admin.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"nostream", ">"}, Block: -1}).Err()
		}, redisconn.Answered, ""},
		{"NOSCRIPT", func() error { return admin.EvalSha(ctx, strings.Repeat("0", 40), nil).Err() }, redisconn.Answered, ""},
		{"script error", func() error { return admin.Eval(ctx, "return redis.error_reply('MINE went wrong')", nil).Err() }, redisconn.Answered, ""},
		{"wrong password", func() error { return open(t, "redis://:wrong@"+srv.Addr(), redisconn.Options{}).Ping(ctx).Err() }, redisconn.Refused, "authentication failed"},
		{"no password", func() error { return open(t, srv.URL(), redisconn.Options{}).Ping(ctx).Err() }, redisconn.Refused, "authentication failed"},
		{"unknown user", func() error { return open(t, "redis://who:x@"+srv.Addr(), redisconn.Options{}).Ping(ctx).Err() }, redisconn.Refused, "authentication failed"},
		{"database out of range", func() error { return open(t, good+"/16", redisconn.Options{}).Ping(ctx).Err() }, redisconn.Refused, "database number"},
		{"NOPERM key", func() error {
			return open(t, "redis://nokeys:u1pass@"+srv.Addr(), redisconn.Options{}).Set(ctx, "dtq:x", "1", 0).Err()
		}, redisconn.Refused, "ACL"},
		{"NOPERM command", func() error {
			return open(t, "redis://noset:u2pass@"+srv.Addr(), redisconn.Options{}).Set(ctx, "dtq:x", "1", 0).Err()
		}, redisconn.Refused, "ACL"},
		{"NOPERM inside a script", func() error {
			return open(t, "redis://noset:u2pass@"+srv.Addr(), redisconn.Options{}).Eval(ctx, "return redis.call('set', KEYS[1], 'x')", []string{"dtq:x"}).Err()
		}, redisconn.Refused, "ACL"},
		{"unknown command", func() error { return admin.Do(ctx, "nosuchcommand").Err() }, redisconn.Refused, "lacks a command"},
		{"cluster URL, plain server", func() error {
			return open(t, "redis+cluster://:"+pw+"@"+srv.Addr(), redisconn.Options{}).Set(ctx, "k", "v", 0).Err()
		}, redisconn.Refused, "not a cluster"},
		{"TLS certificate not trusted", func() error { return open(t, tlsSrv.TLSURL("", ""), redisconn.Options{}).Ping(ctx).Err() }, redisconn.Refused, "TLS"},
		{"READONLY replica", func() error {
			r := open(t, "redis://"+replica.Addr(), redisconn.Options{})
			return r.Set(ctx, "k", "v", 0).Err()
		}, redisconn.Unreachable, ""},
		{"connection refused", func() error { return open(t, down.URL(), redisconn.Options{}).Ping(ctx).Err() }, redisconn.Unreachable, ""},
		{"deadline", func() error {
			c, cancel := context.WithTimeout(ctx, time.Nanosecond)
			defer cancel()
			<-c.Done()
			return admin.Ping(c).Err()
		}, redisconn.Unreachable, ""},
		{"cancelled", func() error {
			c, cancel := context.WithCancel(ctx)
			cancel()
			return admin.Ping(c).Err()
		}, redisconn.Local, ""},
		{"client closed", func() error { return closed.Ping(ctx).Err() }, redisconn.Local, ""},
	} {
		err := c.err()
		if got := redisconn.Classify(err); got != c.class {
			t.Errorf("%s: Classify(%v) = %v, want %v", c.name, err, got, c.class)
		}
		cause := redisconn.RefusedCause(err)
		if (c.cause == "") != (cause == "") || !strings.Contains(cause, c.cause) {
			t.Errorf("%s: RefusedCause(%v) = %q, want one naming %q", c.name, err, cause, c.cause)
		}
		if strings.Contains(cause, pw) {
			t.Errorf("%s: the cause shows the password", c.name)
		}
	}
}

// BUSY (a script runs too long) is a server that cannot serve now, not a refusal.
func TestClassifyBusyServer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{Args: []string{"--busy-reply-threshold", "10"}})
	a, b := srv.Client(t), srv.Client(t)
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		close(started)
		_ = a.Eval(context.Background(), "while true do end", nil).Err()
	}()
	<-started
	ctx, cancel := short()
	defer cancel()
	var err error
	for { // until the script runs past the busy threshold
		if err = b.Ping(ctx).Err(); err != nil || ctx.Err() != nil {
			break
		}
	}
	if !strings.HasPrefix(err.Error(), "BUSY") || redisconn.Classify(err) != redisconn.Unreachable {
		t.Fatalf("Classify(%v) = %v, want a BUSY reply classified unreachable", err, redisconn.Classify(err))
	}
	for b.ScriptKill(ctx).Err() != nil && ctx.Err() == nil {
	}
	wg.Wait()
}

// Health follows the outcomes of the client's commands: not up until the first reply,
// down when Redis goes away, up again when it answers.
func TestHealthFollowsRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	var mu sync.Mutex
	var changes []bool
	h := redisconn.NewHealth(redisconn.HealthOptions{FatalAfter: time.Hour, URL: srv.URL(),
		OnChange: func(up bool) { mu.Lock(); changes = append(changes, up); mu.Unlock() }})
	defer h.Close()
	c := open(t, srv.URL(), redisconn.Options{})
	c.AddHook(h)
	ctx, cancel := short()
	defer cancel()

	if h.Up() || !strings.Contains(h.Reason(), "has not answered yet") {
		t.Fatalf("new: up %v, reason %q", h.Up(), h.Reason())
	}
	select {
	case <-h.Answered():
		t.Fatal("answered before any command")
	default:
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	<-h.Answered()
	if !h.Up() || h.Reason() != "" {
		t.Fatalf("after a reply: up %v, reason %q", h.Up(), h.Reason())
	}
	srv.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("ping of a killed server succeeded")
	}
	if h.Up() || !strings.HasPrefix(h.Reason(), "redis unreachable: ") {
		t.Fatalf("after a failure: up %v, reason %q", h.Up(), h.Reason())
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p := c.Pipeline()
	p.Get(ctx, "k")
	p.Get(ctx, "missing")
	if _, err := p.Exec(ctx); !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	if !h.Up() || h.Err() != nil {
		t.Fatalf("after the restart: up %v, err %v", h.Up(), h.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 3 || !changes[0] || changes[1] || !changes[2] {
		t.Fatalf("changes %v, want up, down, up", changes)
	}
}

// A refusal is final after FatalAfter (here: at once); its error names the cause and
// not the password.
func TestHealthRefusalBecomesFinal(t *testing.T) {
	t.Parallel()
	pw := "secret-" + redistest.Prefix(t)
	srv := redistest.Start(t, redistest.Options{Args: []string{"--requirepass", "other-" + pw}})
	url := "redis://:" + pw + "@" + srv.Addr()
	h := redisconn.NewHealth(redisconn.HealthOptions{URL: url})
	defer h.Close()
	c := open(t, url, redisconn.Options{})
	c.AddHook(h)
	ctx, cancel := short()
	defer cancel()
	if err := c.Ping(ctx).Err(); redisconn.Classify(err) != redisconn.Refused {
		t.Fatalf("ping with a wrong password: %v", err)
	}
	<-h.Refused()
	var re *redisconn.RefusedError
	if !errors.As(h.Err(), &re) || !strings.Contains(re.Cause, "authentication") || !strings.HasPrefix(re.Reply, "WRONGPASS") {
		t.Fatalf("Err() = %#v", h.Err())
	}
	if strings.Contains(re.Error(), pw) || strings.Contains(h.Reason(), pw) {
		t.Fatalf("the refusal shows the password: %q / %q", re.Error(), h.Reason())
	}
	if h.Up() {
		t.Fatal("up after a refusal")
	}
}

// A refusal heals when Redis answers again before FatalAfter: any command after an
// authentication failure, but after a missing ACL permission only the command refused
// (other commands working says nothing about it).
func TestHealthRefusalHeals(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	admin := srv.Client(t)
	ctx, cancel := short()
	defer cancel()
	if err := admin.Do(ctx, "ACL", "SETUSER", "u", "on", ">first", "~*", "+@all", "-set").Err(); err != nil {
		t.Fatal(err)
	}

	// A missing permission: PING working does not end it; SET working does.
	h := redisconn.NewHealth(redisconn.HealthOptions{FatalAfter: time.Hour})
	defer h.Close()
	c := open(t, "redis://u:first@"+srv.Addr(), redisconn.Options{})
	c.AddHook(h)
	if err := c.Set(ctx, "k", "v", 0).Err(); !redis.IsPermissionError(err) {
		t.Fatalf("SET without +set: %v", err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p := c.Pipeline()
	p.Get(ctx, "k")
	_, _ = p.Exec(ctx)
	if h.Up() || !strings.Contains(h.Reason(), "ACL") || h.Err() != nil {
		t.Fatalf("after other commands worked: up %v, reason %q, err %v", h.Up(), h.Reason(), h.Err())
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "u", "+set").Err(); err != nil {
		t.Fatal(err)
	}
	p = c.Pipeline()
	p.Set(ctx, "k", "v", 0)
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if !h.Up() || h.Err() != nil {
		t.Fatalf("after SET worked: up %v, reason %q, err %v", h.Up(), h.Reason(), h.Err())
	}

	// A wrong password: any answer ends it, once the password is right.
	h2 := redisconn.NewHealth(redisconn.HealthOptions{FatalAfter: time.Hour})
	defer h2.Close()
	c2 := open(t, "redis://u:second@"+srv.Addr(), redisconn.Options{})
	c2.AddHook(h2)
	if err := c2.Ping(ctx).Err(); !redis.IsAuthError(err) {
		t.Fatalf("ping with a wrong password: %v", err)
	}
	if h2.Up() || !strings.Contains(h2.Reason(), "authentication") {
		t.Fatalf("after a wrong password: up %v, reason %q", h2.Up(), h2.Reason())
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "u", ">second").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c2.Get(ctx, "k").Err(); err != nil {
		t.Fatal(err)
	}
	if !h2.Up() || h2.Err() != nil {
		t.Fatalf("after the password was added: up %v, err %v", h2.Up(), h2.Err())
	}
}

// QuietRefusals drops warnings and errors whose err is a refusal, and nothing else.
func TestQuietRefusals(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{Args: []string{"--requirepass", "x" + redistest.Prefix(t)}})
	ctx, cancel := short()
	defer cancel()
	refused := open(t, srv.URL(), redisconn.Options{}).Ping(ctx).Err()
	if redisconn.Classify(refused) != redisconn.Refused {
		t.Fatalf("no refusal: %v", refused)
	}
	var buf bytes.Buffer
	log := slog.New(redisconn.QuietRefusals(slog.NewTextHandler(&buf, nil))).With("worker_id", "w")
	log.Error("dropped", "err", refused)
	log.Warn("dropped too", "err", errors.Join(errors.New("claim"), refused))
	log.Info("kept: info", "err", refused)
	log.Error("kept: other error", "err", errors.New("boom"))
	log.Warn("kept: no err")
	out := buf.String()
	if strings.Contains(out, "dropped") || strings.Count(out, "kept") != 3 || !strings.Contains(out, "worker_id=w") {
		t.Fatalf("log:\n%s", out)
	}
}

// NoReply is true of failures short of Redis's answer, false of answers and error
// replies: only the former may have lost the reply of a command that ran.
func TestNoReply(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := srv.Client(t)
	key := redistest.Prefix(t) + ":str"
	down := redistest.Start(t, redistest.Options{})
	down.Kill()
	ctx, cancel := short()
	defer cancel()
	if err := c.Set(ctx, key, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"ok", c.Ping(ctx).Err(), false},
		{"nil reply", c.Get(ctx, key+":missing").Err(), false},
		{"WRONGTYPE", c.HGet(ctx, key, "f").Err(), false},
		{"connection refused", open(t, down.URL(), redisconn.Options{}).Ping(ctx).Err(), true},
		{"deadline", func() error {
			d, cancel := context.WithTimeout(ctx, time.Nanosecond)
			defer cancel()
			<-d.Done()
			return c.Ping(d).Err()
		}(), true},
	} {
		if got := redisconn.NoReply(tc.err); got != tc.want {
			t.Errorf("%s: NoReply(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
