// Package logging makes the process logger of dtq's commands: log/slog, JSON in
// containers, text on a terminal.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// New returns a logger writing to w. format is json, text or auto (text when w is a
// terminal); level is debug, info, warn or error (info when unknown).
func New(format, level string, w io.Writer) *slog.Logger {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(strings.ToLower(level))); err != nil {
		lv = slog.LevelInfo
	}
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "text"
			}
		}
	}
	o := &slog.HandlerOptions{Level: lv}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, o))
	}
	return slog.New(slog.NewJSONHandler(w, o))
}

// RouteRedis sends go-redis's own log lines (dial retries, pool and sentinel events),
// which it otherwise prints as plain text to stderr, to log: one record each, at warn
// level when it reports a failure and info otherwise, with lib=go-redis.
func RouteRedis(log *slog.Logger) {
	redis.SetLogger(redisLogger{log})
}

type redisLogger struct{ log *slog.Logger }

// failure words of go-redis's messages ("failed to dial", "panic", "rejected by hook", …)
var redisFailure = []string{"fail", "error", "panic", "unexpected", "rejected", "removing", "closing", "discard", "ignore", "truncating"}

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	// go-redis prefixes some of its messages with "redis: " and not others
	msg = "redis: " + strings.TrimPrefix(msg, "redis: ")
	level := slog.LevelInfo
	lower := strings.ToLower(msg)
	for _, w := range redisFailure {
		if strings.Contains(lower, w) {
			level = slog.LevelWarn
			break
		}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	l.log.Log(ctx, level, msg, "lib", "go-redis")
}
