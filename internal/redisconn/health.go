package redisconn

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Health follows whether Redis answers a client, from the outcome of every command the
// client sends (it is a redis.Hook, or is fed by one): no pings of its own. It is up
// from the first reply until a call finds Redis unreachable, and up again at the next
// reply. A refusal no wait heals (RefusedCause) that lasts FatalAfter — no command
// answered since, or for a missing ACL permission or command, not that command — makes
// it final: Refused is closed and Err says why; the process should exit.
//
// An answered command costs one atomic load while Redis is up.
type Health struct {
	fatalAfter   time.Duration
	url          string
	log          *slog.Logger
	refusalsOnly bool
	onChange     func(up bool)

	state atomic.Int32

	answered chan struct{} // closed at the first reply
	refused  chan struct{} // closed when a refusal became final

	mu           sync.Mutex
	answeredDone bool
	lastErr      string // the latest failure's text, scrubbed
	cause        string // of the refusal under way; "" when none
	refusalReply string // the reply that began it, scrubbed
	refusedCmd   string // the command refused, when only its own success ends the refusal
	seq          int    // numbers refusals: a timer of one that ended does nothing
	timer        *time.Timer
	err          *RefusedError
}

// Health states.
const (
	healthUnknown int32 = iota // nothing answered yet
	healthUp
	healthDown     // the latest outcome: Redis unreachable
	healthRefusing // a refusal under way
)

// HealthOptions configure a Health.
type HealthOptions struct {
	// FatalAfter is how long a refusal may last before it is final (0: at once).
	FatalAfter time.Duration
	// URL is the client's Redis URL: its password is scrubbed from every text kept.
	URL string
	// Logger, when set, gets one line when Redis becomes unreachable or refuses, and
	// one when it answers again (not one per failed command).
	Logger *slog.Logger
	// RefusalsOnly keeps the Logger to refusals, for a client whose outages something
	// else reports.
	RefusalsOnly bool
	// OnChange, when set, is called with the new state on every change of Up.
	OnChange func(up bool)
}

// NewHealth returns a Health that has seen nothing yet (not up).
func NewHealth(o HealthOptions) *Health {
	return &Health{fatalAfter: max(0, o.FatalAfter), url: o.URL, log: o.Logger, refusalsOnly: o.RefusalsOnly, onChange: o.OnChange,
		answered: make(chan struct{}), refused: make(chan struct{})}
}

// RefusedError is a final refusal: Cause says what to fix, Reply is what Redis said
// (neither holds the password).
type RefusedError struct {
	Cause string
	Reply string
}

func (e *RefusedError) Error() string {
	return "redis refuses this client: " + e.Cause + " (" + e.Reply + ")"
}

// Up reports whether the latest outcome was a reply (and no refusal is under way).
func (h *Health) Up() bool { return h.state.Load() == healthUp }

// Refusing reports whether a refusal is under way (not healed, maybe not final yet).
func (h *Health) Refusing() bool { return h.state.Load() == healthRefusing }

// Answered is closed once Redis has answered a command.
func (h *Health) Answered() <-chan struct{} { return h.answered }

// Refused is closed once a refusal is final; Err then returns it.
func (h *Health) Refused() <-chan struct{} { return h.refused }

// Err returns the final refusal, or nil.
func (h *Health) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		return nil
	}
	return h.err
}

// Reason says why Health is not up ("" when it is), in one line without secrets.
func (h *Health) Reason() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch h.state.Load() {
	case healthUp:
		return ""
	case healthRefusing:
		return "redis refuses this client: " + h.cause + " (" + h.refusalReply + ")"
	case healthDown:
		return "redis unreachable: " + h.lastErr
	default:
		if h.lastErr != "" {
			return "redis has not answered yet: " + h.lastErr
		}
		return "redis has not answered yet"
	}
}

// Close stops a pending refusal timer.
func (h *Health) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
}

// Observe records the outcome of one command.
func (h *Health) Observe(cmd redis.Cmder, err error) {
	if (err == nil || err == redis.Nil) && h.state.Load() == healthUp {
		return
	}
	h.observe(cmd.Name(), err)
}

// ObservePipeline records the outcome of a pipeline (err is its first error).
func (h *Health) ObservePipeline(cmds []redis.Cmder, err error) {
	if err == nil && h.state.Load() == healthUp {
		return
	}
	for _, c := range cmds {
		h.observe(c.Name(), c.Err())
	}
}

// DialHook, ProcessHook and ProcessPipelineHook make Health a redis.Hook.
func (h *Health) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *Health) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.Observe(cmd, err)
		return err
	}
}

func (h *Health) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.ObservePipeline(cmds, err)
		return err
	}
}

// handshake lists the commands go-redis sends on a new connection (through the hooks):
// HELLO's success says nothing of the SELECT after it, and their failures reach the
// command that dialled.
func handshake(name string) bool {
	switch name {
	case "hello", "auth", "select", "client":
		return true
	}
	return false
}

func (h *Health) observe(name string, err error) {
	if handshake(name) {
		return
	}
	switch Classify(err) {
	case Answered:
		if h.state.Load() != healthUp {
			h.answer(name)
		}
	case Unreachable:
		h.unreachable(err)
	case Refused:
		h.refuse(name, err)
	}
}

func (h *Health) text(err error) string {
	return Scrub(strings.Join(strings.Fields(err.Error()), " "), h.url)
}

func (h *Health) answer(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return // final
	}
	if h.cause != "" {
		if h.refusedCmd != "" && name != h.refusedCmd {
			return // another command's success says nothing of the one refused
		}
		h.endRefusal()
	}
	prev := h.state.Swap(healthUp)
	if !h.answeredDone {
		h.answeredDone = true
		close(h.answered)
	}
	if prev == healthUp {
		return
	}
	if h.log != nil && (prev == healthRefusing || prev == healthDown && !h.refusalsOnly) {
		h.log.Info("redis: answering again")
	}
	h.changed(true)
}

func (h *Health) unreachable(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastErr = h.text(err)
	if h.cause != "" || h.err != nil {
		return // a refusal under way stays one: its timer decides
	}
	prev := h.state.Swap(healthDown)
	if prev == healthDown {
		return
	}
	if h.log != nil && !h.refusalsOnly {
		h.log.Warn("redis: unreachable; retrying", "err", h.lastErr)
	}
	if prev == healthUp {
		h.changed(false)
	}
}

func (h *Health) refuse(name string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastErr = h.text(err)
	if h.cause != "" || h.err != nil {
		return
	}
	cause, perCommand := refusal(err)
	h.cause, h.refusalReply, h.refusedCmd = cause, h.lastErr, ""
	if perCommand {
		h.refusedCmd = name
	}
	h.seq++
	prev := h.state.Swap(healthRefusing)
	if h.log != nil {
		h.log.Warn("redis: refuses this client; exiting unless it heals", "cause", cause, "reply", h.lastErr, "within_s", h.fatalAfter.Seconds())
	}
	if prev == healthUp {
		h.changed(false)
	}
	if h.fatalAfter <= 0 {
		h.final()
		return
	}
	seq := h.seq
	h.timer = time.AfterFunc(h.fatalAfter, func() { h.expire(seq) })
}

func (h *Health) expire(seq int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seq == seq && h.cause != "" && h.err == nil {
		h.final()
	}
}

func (h *Health) final() {
	h.err = &RefusedError{Cause: h.cause, Reply: h.refusalReply}
	close(h.refused)
}

func (h *Health) endRefusal() {
	h.cause, h.refusalReply, h.refusedCmd = "", "", ""
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
}

func (h *Health) changed(up bool) {
	if h.onChange != nil {
		h.onChange(up)
	}
}

// QuietRefusals wraps a log handler so that warnings and errors whose err is a
// refusal (Classify: Refused) are dropped: a Health reports each refusal once, with its
// cause, and every loop retrying into it would otherwise repeat it until the exit.
func QuietRefusals(h slog.Handler) slog.Handler { return quietRefusals{h} }

type quietRefusals struct{ slog.Handler }

func (q quietRefusals) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		refused := false
		r.Attrs(func(a slog.Attr) bool {
			if e, ok := a.Value.Any().(error); ok && a.Key == "err" && Classify(e) == Refused {
				refused = true
				return false
			}
			return true
		})
		if refused {
			return nil
		}
	}
	return q.Handler.Handle(ctx, r)
}

func (q quietRefusals) WithAttrs(as []slog.Attr) slog.Handler {
	return quietRefusals{q.Handler.WithAttrs(as)}
}

func (q quietRefusals) WithGroup(name string) slog.Handler {
	return quietRefusals{q.Handler.WithGroup(name)}
}
