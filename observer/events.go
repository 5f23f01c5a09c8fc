package observer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/blockread"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/service"
)

// The events endpoint's bounds.
const (
	// BacklogEvents is how many of the latest events a stream starts with when the
	// client names no event to resume after.
	BacklogEvents = 50
	// DefaultMaxStreams is DTQ_OBSERVER_MAX_STREAMS's default.
	DefaultMaxStreams = 256
	// PingEvery is the time between two ": ping" comments of an idle stream.
	PingEvery = 15 * time.Second
	// subscriberBatches is how many read batches a stream may have waiting: one that
	// falls further behind is dropped (its client reconnects with Last-Event-ID).
	subscriberBatches = 64
	// readCount is the most entries the shared reader takes in one XREAD, and pageCount
	// in one XRANGE of a stream catching up.
	readCount = 512
	pageCount = 200
	// streamWriteTimeout bounds one write to a client: a client that reads nothing for
	// that long is dropped.
	streamWriteTimeout = 30 * time.Second
	// streamRedisTimeout bounds a stream's own reads (its backlog, its catching up).
	streamRedisTimeout = 5 * time.Second
)

// batch is what the shared reader read in one XREAD: every entry after prev.
type batch struct {
	prev string // the reader's cursor before the read: every entry up to it came in earlier batches
	msgs []redis.XMessage
}

// subscriber is one open stream's place in the hub.
type subscriber struct {
	ch      chan batch
	dropped chan struct{} // closed when the hub drops the subscriber
	reason  string        // why, set before dropped is closed
}

// hub is the one reader of the events stream of a Server: it XREAD BLOCKs the stream
// on one connection (blockread: CLIENT UNBLOCK ends it) and hands each batch read to
// every subscriber, whatever their number. A batch is shared, never copied; a
// subscriber whose buffer is full is dropped. It starts with the first subscriber.
type hub struct {
	service.Base
	rdb    redis.UniversalClient
	key    string
	log    *slog.Logger
	reader *blockread.Reader

	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	started bool
	closed  bool
	cursor  string // the reader's: set before it starts, then its own
}

func newHub(rdb redis.UniversalClient, key string, log *slog.Logger) *hub {
	return &hub{rdb: rdb, key: key, log: log, reader: blockread.New(rdb, blockread.Options{}),
		subs: map[*subscriber]struct{}{}}
}

var errHubClosed = errors.New("the observer is stopping")

// subscribe adds a subscriber, starting the reader with the first one. The reader's
// cursor is read first, before the subscriber reads its backlog: every entry after
// it comes in a batch, every entry up to it was in the stream before the backlog read.
func (h *hub) subscribe(ctx context.Context) (*subscriber, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errHubClosed
	}
	if !h.started {
		cursor, err := lastID(ctx, h.rdb, h.key)
		if err != nil {
			return nil, err
		}
		h.started, h.cursor = true, cursor
		h.Go(context.Background(), func(ctx context.Context) {
			service.Supervise(ctx, "events reader", h.log, nil, h.loop)
		})
	}
	s := &subscriber{ch: make(chan batch, subscriberBatches), dropped: make(chan struct{})}
	h.subs[s] = struct{}{}
	return s, nil
}

func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
}

// dropLocked removes s, telling it why.
func (h *hub) dropLocked(s *subscriber, reason string) {
	delete(h.subs, s)
	s.reason = reason
	close(s.dropped)
}

func (h *hub) broadcast(b batch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.ch <- b:
		default:
			h.dropLocked(s, "too slow: reconnect with Last-Event-ID to resume")
		}
	}
}

// close ends every stream and the reader; subscribe refuses from then on.
func (h *hub) close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		for s := range h.subs {
			h.dropLocked(s, "the observer is stopping")
		}
	}
	h.mu.Unlock()
	h.Stop()
	h.reader.Close()
}

// loop reads the stream after h.cursor, until ctx ends. A failed read is retried
// (logged once per outage); the subscribers wait meanwhile, and get what came during
// the outage after it.
func (h *hub) loop(ctx context.Context) error {
	failing := false
	for ctx.Err() == nil {
		res, err := h.reader.XRead(ctx, &redis.XReadArgs{Streams: []string{h.key, h.cursor}, Count: readCount, Block: 0})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if !failing {
				h.log.Warn("events reader: read failed; retrying", "err", err)
			}
			failing = true
			service.Sleep(ctx, service.Jitter(time.Second, 0.5))
			continue
		}
		if failing {
			h.log.Info("events reader: reading again")
			failing = false
		}
		for _, st := range res {
			if len(st.Messages) == 0 {
				continue
			}
			h.broadcast(batch{prev: h.cursor, msgs: st.Messages})
			h.cursor = st.Messages[len(st.Messages)-1].ID
		}
	}
	return nil
}

// lastID is the id of the stream's newest entry, "0-0" when it has none.
func lastID(ctx context.Context, rdb redis.UniversalClient, key string) (string, error) {
	ms, err := rdb.XRevRangeN(ctx, key, "+", "-", 1).Result()
	if err != nil {
		return "", err
	}
	if len(ms) == 0 {
		return "0-0", nil
	}
	return ms[0].ID, nil
}

// parseEntryID reads a cursor: MS-SEQ, or MS alone (as MS-0).
func parseEntryID(s string) (keys.EntryID, bool) {
	if !strings.Contains(s, "-") {
		s += "-0"
	}
	return keys.ParseEntryID(s)
}

// mustID parses an id Redis gave.
func mustID(s string) keys.EntryID {
	id, _ := parseEntryID(s)
	return id
}

// eventName is the SSE event name of an entry's type: the type when it is a plain
// token, else none (the client sees a "message" event; data still holds the type).
func eventName(t string) string {
	if t == "" || len(t) > 64 || !keys.NameChars(t, "_.:-") {
		return ""
	}
	return t
}

// sse writes one stream's events, each flushed, each write bounded.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s *sse) write(chunk string) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if _, err := s.w.Write([]byte(chunk)); err != nil {
		return err
	}
	return s.rc.Flush()
}

// event formats one entry: id, event (its type) and data (its fields and its id as
// one line of JSON, in which <, > and & are escaped).
func formatEvent(m redis.XMessage) string {
	fields := make(map[string]string, len(m.Values)+1)
	for k, v := range m.Values {
		fields[k] = fmt.Sprint(v)
	}
	fields["id"] = m.ID
	data, _ := json.Marshal(fields) // a map of strings always marshals
	var b strings.Builder
	b.WriteString("id: " + m.ID + "\n")
	if name := eventName(fields[keys.EventFieldType]); name != "" {
		b.WriteString("event: " + name + "\n")
	}
	b.WriteString("data: ")
	b.Write(data)
	b.WriteString("\n\n")
	return b.String()
}

// events serves GET /api/v1/events: the events stream as Server-Sent Events.
func (s *Server) events(c echo.Context) error {
	r := c.Request()
	cursor, source := r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	if cursor == "" {
		cursor, source = c.QueryParam("after"), "after"
	}
	var after keys.EntryID
	resume := cursor != ""
	if resume {
		var ok bool
		if after, ok = parseEntryID(cursor); !ok {
			return fail(http.StatusBadRequest, "bad_cursor", "%s %q is not an event id (MS-SEQ, as the id: lines give)", source, cursor)
		}
	}
	limit := s.cfg.MaxStreams
	if limit <= 0 { // a Config built in Go without it
		limit = DefaultMaxStreams
	}
	if n := s.streams.Add(1); n > int64(limit) {
		s.streams.Add(-1)
		return fail(http.StatusServiceUnavailable, "too_many_streams", "%d event streams are open already (DTQ_OBSERVER_MAX_STREAMS)", limit)
	}
	defer s.streams.Add(-1)
	sctx, cancel := context.WithTimeout(r.Context(), streamRedisTimeout)
	sub, err := s.hub.subscribe(sctx)
	cancel()
	if errors.Is(err, errHubClosed) {
		return fail(http.StatusServiceUnavailable, "shutting_down", "%s", err)
	} else if err != nil {
		return err
	}
	defer s.hub.unsubscribe(sub)
	s.streamsOpen.Inc()
	defer s.streamsOpen.Dec()

	out := &sse{w: c.Response(), rc: http.NewResponseController(c.Response())}
	ctx := r.Context()
	// The first reads decide the status: Redis down, no stream.
	var backlog []redis.XMessage
	var note string
	rctx, cancel := context.WithTimeout(ctx, streamRedisTimeout)
	if resume {
		var oldest []redis.XMessage
		oldest, err = s.rdb.XRangeN(rctx, s.ks.Events(), "-", "+", 1).Result()
		if err == nil && len(oldest) == 1 && after != (keys.EntryID{}) && after.Compare(mustID(oldest[0].ID)) < 0 {
			note = fmt.Sprintf(": %s %s is older than the oldest event kept (%s): resuming from the oldest; the events between were trimmed\n\n",
				source, after, oldest[0].ID)
		}
	} else {
		backlog, err = s.rdb.XRevRangeN(rctx, s.ks.Events(), "+", "-", BacklogEvents).Result()
		slices.Reverse(backlog)
	}
	cancel()
	if err != nil {
		return err
	}
	h := c.Response().Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // a proxy must not hold events back
	c.Response().WriteHeader(http.StatusOK)
	if err := out.write(": dtq events\n\n" + note); err != nil {
		return nil
	}

	last := after // the last event sent (or the one resumed after)
	send := func(ms []redis.XMessage) error {
		var b strings.Builder
		for _, m := range ms {
			id := mustID(m.ID)
			if id.Compare(last) <= 0 {
				continue
			}
			b.WriteString(formatEvent(m))
			last = id
		}
		if b.Len() == 0 {
			return nil
		}
		return out.write(b.String())
	}
	// catchUp sends what the stream holds after last, up to end ("+": all of it).
	catchUp := func(end string) error {
		for {
			rctx, cancel := context.WithTimeout(ctx, streamRedisTimeout)
			ms, err := s.rdb.XRangeN(rctx, s.ks.Events(), "("+last.String(), end, pageCount).Result()
			cancel()
			if err != nil {
				return err
			}
			if err := send(ms); err != nil {
				return err
			}
			if len(ms) < pageCount {
				return nil
			}
		}
	}
	if resume {
		err = catchUp("+")
	} else {
		err = send(backlog)
	}
	if err != nil {
		s.streamEnded(err)
		return nil
	}
	ping := time.NewTicker(s.pingEvery)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sub.dropped:
			_ = out.write(": dropped: " + sub.reason + "\n\n")
			return nil
		case <-ping.C:
			err = out.write(": ping\n\n")
		case b := <-sub.ch:
			// The reader read this batch after b.prev: what came between the last event
			// sent and b.prev (before this stream subscribed, or in batches it missed)
			// is read from Redis first.
			if mustID(b.prev).Compare(last) > 0 {
				err = catchUp(b.prev)
			}
			if err == nil {
				err = send(b.msgs)
			}
		}
		if err != nil {
			s.streamEnded(err)
			return nil
		}
	}
}

// streamEnded logs why a stream ended early (a write that failed: the client went).
func (s *Server) streamEnded(err error) {
	s.log.Debug("observer: event stream ended", "err", s.classify(err).Message)
}

// Close ends every open event stream and the events reader; the HTTP server's
// shutdown calls it (http.Server.RegisterOnShutdown), so that it does not wait for
// streams that never end by themselves. Idempotent.
func (s *Server) Close() { s.hub.close() }
