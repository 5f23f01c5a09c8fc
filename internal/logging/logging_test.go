package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/syncbuf"
)

// After RouteRedis, a line go-redis logs (a dial failure here) is a record of the
// logger: JSON, at warn, its text once prefixed with "redis: ", marked lib=go-redis.
func TestRouteRedis(t *testing.T) {
	t.Parallel()
	var buf syncbuf.Buffer
	RouteRedis(New("json", "info", &buf).With("worker_id", "w1"))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err == nil {
		t.Fatal("ping of a closed port succeeded")
	}
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		msg, _ := m["msg"].(string)
		if m["lib"] == "go-redis" && strings.HasPrefix(msg, "redis: connection pool: failed to dial") &&
			m["level"] == "WARN" && m["worker_id"] == "w1" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no go-redis record:\n%s", buf.String())
	}
}

// Levels: failures at warn, other events at info.
func TestRedisLoggerLevels(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := redisLogger{slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	l.Printf(context.Background(), "sentinel: new master=%q addr=%q", "m", "h:1")
	l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 5, "refused")
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, m)
	}
	if len(recs) != 2 || recs[0]["level"] != "INFO" || recs[0]["msg"] != `redis: sentinel: new master="m" addr="h:1"` ||
		recs[1]["level"] != "WARN" || recs[1]["msg"] != "redis: connection pool: failed to dial after 5 attempts: refused" {
		t.Fatalf("records %v", recs)
	}
}
