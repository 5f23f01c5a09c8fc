package observer_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/internal/syncbuf"
	"github.com/dtq/dtq/observer"
)

// streamEnv serves an observer whose event streams tests open.
type streamEnv struct {
	t     *testing.T
	url   string
	rdb   *redis.Client // the test's own client
	ks    keys.Space
	obs   *observer.Server
	log   *syncbuf.Buffer
	xread atomic.Int64 // XREADs the observer's client sent
}

type xreadCounter struct{ n *atomic.Int64 }

func (xreadCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h xreadCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "xread" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (xreadCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// newStreamEnv serves an observer on srv (nil: the shared server); mod changes its
// configuration, o its options.
func newStreamEnv(t *testing.T, srv *redistest.Server, mod func(*observer.Config), o observer.Options) *streamEnv {
	t.Helper()
	if srv == nil {
		srv = redistest.Shared(t)
	}
	e := &streamEnv{t: t, ks: keys.New(redistest.Prefix(t)), rdb: srv.Client(t), log: &syncbuf.Buffer{}}
	cfg, err := observer.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{
		"DTQ_REDIS_URL": srv.URL(), "DTQ_KEY_PREFIX": e.ks.Prefix(), "DTQ_OBSERVER_TOKEN": token,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if mod != nil {
		mod(&cfg)
	}
	ordb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = ordb.Close() })
	ordb.AddHook(xreadCounter{&e.xread})
	o.Config, o.Redis, o.Logger = cfg, ordb, slog.New(slog.NewJSONHandler(e.log, nil))
	e.obs = observer.New(o)
	hs := httptest.NewServer(e.obs.Handler())
	t.Cleanup(hs.Close)
	t.Cleanup(e.obs.Close) // runs first: the streams end, then the server closes
	e.url = hs.URL
	return e
}

// sseEvent is one event or comment read off a stream.
type sseEvent struct {
	id, event, data string
	comment         string // a comment line's text, for a comment
}

// stream is an open event stream.
type stream struct {
	t      *testing.T
	res    *http.Response
	events chan sseEvent
	cancel context.CancelFunc
	done   chan struct{} // closed when the stream ended
}

// open opens GET /api/v1/events (path adds a query) with the headers hdr; it fails the
// test unless the answer is a 200 event stream.
func (e *streamEnv) open(query string, hdr ...string) *stream {
	e.t.Helper()
	s, res := e.try(query, hdr...)
	if s == nil {
		b, _ := io.ReadAll(res.Body)
		e.t.Fatalf("GET /api/v1/events%s: %d %s", query, res.StatusCode, b)
	}
	return s
}

// try opens a stream; on an answer other than 200 it returns nil and the answer.
func (e *streamEnv) try(query string, hdr ...string) (*stream, *http.Response) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/api/v1/events"+query, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		cancel()
		e.t.Cleanup(func() { res.Body.Close() })
		return nil, res
	}
	s := &stream{t: e.t, res: res, events: make(chan sseEvent, 10000), cancel: cancel, done: make(chan struct{})}
	go s.read()
	e.t.Cleanup(s.close)
	return s, res
}

func (s *stream) read() {
	defer close(s.done)
	defer close(s.events)
	r := bufio.NewReader(s.res.Body)
	var ev sseEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev != (sseEvent{}) {
				s.events <- ev
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, ":"):
			s.events <- sseEvent{comment: strings.TrimSpace(line[1:])}
		default:
			k, v, _ := strings.Cut(line, ": ")
			switch k {
			case "id":
				ev.id = v
			case "event":
				ev.event = v
			case "data":
				ev.data = v
			default:
				s.events <- sseEvent{comment: "UNKNOWN LINE " + line}
			}
		}
	}
}

func (s *stream) close() {
	s.cancel()
	<-s.done
	s.res.Body.Close()
}

// next returns the next event, skipping comments unless comments is set; ok is false
// once the stream ended.
func (s *stream) next(comments bool) (sseEvent, bool) {
	s.t.Helper()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return sseEvent{}, false
			}
			if ev.comment != "" && !comments {
				continue
			}
			return ev, true
		case <-deadline.C:
			s.t.Fatal("timed out waiting for an event")
		}
	}
}

// nextEvent is the next event (not a comment); the stream must not end.
func (s *stream) nextEvent() sseEvent {
	s.t.Helper()
	ev, ok := s.next(false)
	if !ok {
		s.t.Fatal("the stream ended")
	}
	return ev
}

// add appends an event to the stream and returns its id.
func (e *streamEnv) add(fields ...any) string {
	e.t.Helper()
	id, err := e.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: e.ks.Events(), Values: fields}).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// addN appends n TASK_DEAD events numbered from 1 in their detail and returns their ids.
func (e *streamEnv) addN(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.add("type", "TASK_DEAD", "worker", "w1", "ts", "1700000000000", "queue", "q", "detail", strconv.Itoa(i+1))
	}
	return ids
}

func data(t *testing.T, ev sseEvent) map[string]string {
	t.Helper()
	var m map[string]string
	if err := json.Unmarshal([]byte(ev.data), &m); err != nil {
		t.Fatalf("data %q: %v", ev.data, err)
	}
	return m
}

// wantIDs reads len(ids) events and checks they are those, in order.
func (s *stream) wantIDs(ids []string) {
	s.t.Helper()
	for _, id := range ids {
		if ev := s.nextEvent(); ev.id != id {
			s.t.Fatalf("event %q (%s), want %q", ev.id, ev.data, id)
		}
	}
}

// Without a cursor a stream starts with the last 50 events, oldest first, then the
// live ones, each with its id, its type as the event name and its fields as data.
func TestEventsBacklogThenLive(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, nil, nil, observer.Options{})
	ids := e.addN(60)
	s := e.open("")
	if ct, cc := s.res.Header.Get("Content-Type"), s.res.Header.Get("Cache-Control"); ct != "text/event-stream" || cc != "no-cache" {
		t.Fatalf("Content-Type %q, Cache-Control %q", ct, cc)
	}
	first := s.nextEvent()
	if first.id != ids[10] || first.event != "TASK_DEAD" {
		t.Fatalf("first event %+v, want id %s (the 11th of 60)", first, ids[10])
	}
	want := map[string]string{"id": ids[10], "type": "TASK_DEAD", "worker": "w1", "ts": "1700000000000", "queue": "q", "detail": "11"}
	if got := data(t, first); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("data %v, want %v", got, want)
	}
	s.wantIDs(ids[11:])
	live := e.addN(3)
	s.wantIDs(live)
}

// An empty stream: the first events are the live ones.
func TestEventsEmptyStreamThenLive(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, nil, nil, observer.Options{})
	s := e.open("")
	if ev, _ := s.next(true); ev.comment != "dtq events" {
		t.Fatalf("first line %+v, want the stream's opening comment", ev)
	}
	s.wantIDs(e.addN(5))
}

// Last-Event-ID (or ?after=, which the header overrides) resumes after that event.
func TestEventsResume(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, nil, nil, observer.Options{})
	ids := e.addN(300) // more than one page of catching up
	s := e.open("", "Last-Event-ID", ids[29])
	s.wantIDs(ids[30:])
	more := e.addN(2)
	s.wantIDs(more)
	s.close()

	s = e.open("?after=" + ids[297])
	s.wantIDs(append(ids[298:], more...))
	s.close()

	s = e.open("?after="+ids[0], "Last-Event-ID", ids[298])
	s.wantIDs(append(ids[299:], more...))
}

// A Last-Event-ID older than the oldest event kept resumes from the oldest, and the
// stream says so in a comment.
func TestEventsResumeOlderThanOldest(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, nil, nil, observer.Options{})
	ids := e.addN(10)
	if err := e.rdb.XTrimMaxLen(context.Background(), e.ks.Events(), 5).Err(); err != nil {
		t.Fatal(err)
	}
	s := e.open("", "Last-Event-ID", ids[1])
	var said bool
	for {
		ev, ok := s.next(true)
		if !ok {
			t.Fatal("the stream ended")
		}
		if ev.comment != "" {
			said = said || strings.Contains(ev.comment, "older than the oldest event kept ("+ids[5]+")")
			continue
		}
		if ev.id != ids[5] || !said {
			t.Fatalf("first event %s (said %v), want %s after the comment", ev.id, said, ids[5])
		}
		break
	}
	s.wantIDs(ids[6:])
}

func TestEventsBadCursor(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, nil, nil, observer.Options{})
	for _, tc := range []struct{ query, header string }{
		{"?after=abc", ""}, {"?after=1-x", ""}, {"?after=-1", ""}, {"?after=1-", ""}, {"?after=%2B1", ""},
		{"", "1-2-3"}, {"", "99999999999999999999999-0"}, {"?after=1-0", "<script>"},
	} {
		var hdr []string
		if tc.header != "" {
			hdr = []string{"Last-Event-ID", tc.header}
		}
		s, res := e.try(tc.query, hdr...)
		if s != nil {
			t.Fatalf("%+v: a stream opened", tc)
		}
		b, _ := io.ReadAll(res.Body)
		wantError(t, resp{status: res.StatusCode, body: string(b)}, http.StatusBadRequest, "bad_cursor", "not an event id")
		if strings.Contains(string(b), "<script>") {
			t.Fatalf("%+v: %s holds the raw header", tc, b)
		}
	}
	e.open("?after=1700000000000") // a bare ms is an id
}

// The events are data: a type that is not a plain token names no event, and the data
// line is one line of JSON with <, > and & escaped.
func TestEventsDataIsData(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, nil, nil, observer.Options{})
	evil := "<img src=x onerror=alert(1)>\nevent: forged\ndata: x"
	id := e.add("type", evil, "worker", "w", "detail", "a & b\r\n<b>")
	s := e.open("?after=0")
	ev := s.nextEvent()
	if ev.id != id || ev.event != "" {
		t.Fatalf("event %+v: want id %s and no event name", ev, id)
	}
	if strings.ContainsAny(ev.data, "<>&") {
		t.Fatalf("data %q holds raw HTML characters", ev.data)
	}
	if m := data(t, ev); m["type"] != evil || m["detail"] != "a & b\r\n<b>" {
		t.Fatalf("data %v lost the fields", m)
	}
}

// Many streams, one reader: the observer sends one XREAD per batch read, not one per
// stream, and every stream gets every event.
func TestEventsManyStreamsShareOneReader(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, nil, nil, observer.Options{})
	const n = 20
	ss := make([]*stream, n)
	for i := range ss {
		ss[i] = e.open("")
	}
	var ids []string
	for range 5 {
		id := e.addN(1)
		ids = append(ids, id...)
		for _, s := range ss {
			s.wantIDs(id)
		}
	}
	// one XREAD to start, one per event read (each returned with something), and the
	// one blocked now
	if got := e.xread.Load(); got > int64(len(ids))+2 {
		t.Fatalf("%d XREADs for %d streams and %d events: not one shared reader", got, n, len(ids))
	}
}

// DTQ_OBSERVER_MAX_STREAMS caps the open streams: one more is a 503; a closed one
// frees its place.
func TestEventsCap(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, nil, func(c *observer.Config) { c.MaxStreams = 2 }, observer.Options{})
	a := e.open("")
	e.open("")
	s, res := e.try("")
	if s != nil {
		t.Fatal("a third stream opened")
	}
	b, _ := io.ReadAll(res.Body)
	wantError(t, resp{status: res.StatusCode, body: string(b)}, http.StatusServiceUnavailable, "too_many_streams", "DTQ_OBSERVER_MAX_STREAMS")
	a.close()
	eventually(t, "a place freed", func() bool {
		s, _ := e.try("")
		return s != nil
	})
}

func TestEventsPing(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, nil, nil, observer.Options{PingEvery: 10 * time.Millisecond})
	s := e.open("")
	for {
		ev, ok := s.next(true)
		if !ok {
			t.Fatal("the stream ended")
		}
		if ev.comment == "ping" {
			return
		}
	}
}

// With reads closed a stream needs the token.
func TestEventsReadClosed(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, nil, func(c *observer.Config) { c.ReadOpen = false }, observer.Options{})
	s, res := e.try("")
	if s != nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d", res.StatusCode)
	}
	e.open("", "Authorization", "Bearer "+token)
}

// Close (the HTTP server's shutdown calls it) ends the open streams, so the shutdown
// does not wait for them; a stream asked for afterwards is refused.
func TestEventsEndAtShutdown(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, nil, nil, observer.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e.obs.Handler()}
	srv.RegisterOnShutdown(e.obs.Close)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	e.url = "http://" + ln.Addr().String()
	s := e.open("")
	s.wantIDs(e.addN(1))
	// without Close the shutdown would wait for the stream until its deadline
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var said bool
	for {
		ev, ok := s.next(true)
		if !ok {
			break
		}
		said = said || strings.Contains(ev.comment, "the observer is stopping")
	}
	if !said {
		t.Error("the stream ended without saying why")
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
}

// A stream outlives the server's read timeout (cmd/dtq-observer sets one).
func TestEventsOutliveReadTimeout(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, nil, nil, observer.Options{PingEvery: 10 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const readTimeout = 100 * time.Millisecond
	srv := &http.Server{Handler: e.obs.Handler(), ReadTimeout: readTimeout}
	srv.RegisterOnShutdown(e.obs.Close)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	e.url = "http://" + ln.Addr().String()
	s := e.open("")
	opened := time.Now()
	// read the pings until well past the read timeout
	for time.Since(opened) < 5*readTimeout {
		if _, ok := s.next(true); !ok {
			t.Fatalf("the stream ended after %v", time.Since(opened))
		}
	}
	s.wantIDs(e.addN(1))
}

// Redis killed and restarted: the open stream waits, then carries the events added
// after the restart.
func TestEventsAcrossRedisRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AOF: true})
	e := newStreamEnv(t, srv, nil, observer.Options{})
	s := e.open("")
	s.wantIDs(e.addN(1))
	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := redistest.Ping(ctx, e.rdb); err != nil {
		t.Fatal(err)
	}
	s.wantIDs(e.addN(2))
}

// Redis unreachable when a stream is asked for: 503, no stream, the password nowhere.
func TestEventsRedisUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	const secret = "s3cretpassw0rd"
	cfg, err := observer.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{"DTQ_REDIS_URL": "redis://:" + secret + "@" + addr + "/0"}))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: secret, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	obs := observer.New(observer.Options{Config: cfg, Redis: rdb})
	hs := httptest.NewServer(obs.Handler())
	t.Cleanup(hs.Close)
	t.Cleanup(obs.Close)
	e := &streamEnv{t: t, url: hs.URL}
	s, res := e.try("")
	if s != nil {
		t.Fatal("a stream opened")
	}
	b, _ := io.ReadAll(res.Body)
	wantError(t, resp{status: res.StatusCode, body: string(b)}, http.StatusServiceUnavailable, "redis_unavailable", "redis unreachable")
	if strings.Contains(string(b), secret) {
		t.Fatalf("the password in %s", b)
	}
}
