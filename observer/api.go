package observer

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/liveness"
	"github.com/dtq/dtq/internal/queuestat"
)

// MaxBodyBytes caps the payload and result a task answer shows.
const MaxBodyBytes = 64 << 10

type workersView struct {
	Workers []liveness.Worker `json:"workers"`
	Live    int               `json:"live"`
	Stale   int               `json:"stale"`
	Stopped int               `json:"stopped"`
}

func (s *Server) workers(c echo.Context) error {
	ws, err := liveness.List(c.Request().Context(), s.rdb, s.ks, s.now())
	if err != nil {
		return err
	}
	v := workersView{Workers: ws}
	if v.Workers == nil {
		v.Workers = []liveness.Worker{}
	}
	slices.SortFunc(v.Workers, func(a, b liveness.Worker) int { return compare(a.ID, b.ID) })
	for _, w := range ws {
		switch w.Liveness {
		case liveness.Live:
			v.Live++
		case liveness.Stale:
			v.Stale++
		case liveness.Gone:
			v.Stopped++
		}
	}
	return c.JSON(http.StatusOK, v)
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// queueView is a queue's backlog, as `dtq inspect queue` prints it.
type queueView struct {
	client.QueueInfo
	// Error: Redis refused to read a key of this queue (one of the wrong type); the
	// counts are then zero.
	Error string `json:"error,omitempty"`
}

// readQueues reads the backlog of every queue in names in one pipelined round trip,
// and reports whether each is in the set of known queues.
func (s *Server) readQueues(c echo.Context, names []string) ([]queueView, []bool, error) {
	ctx := c.Request().Context()
	pipe := s.rdb.Pipeline()
	sched := make([]*redis.IntCmd, len(names))
	retrying := make([]*redis.IntCmd, len(names))
	throughput := make([]func() (*client.Throughput, error), len(names))
	paused := make([]*redis.IntCmd, len(names))
	known := make([]*redis.BoolCmd, len(names))
	specs := make([]queuestat.Spec, len(names))
	for i, n := range names {
		q := s.ks.Queue(n)
		sched[i] = pipe.ZCard(ctx, q.Schedule())
		retrying[i] = pipe.ZCard(ctx, q.Retrying())
		throughput[i] = client.ReadThroughput(ctx, pipe, q, s.now())
		paused[i] = pipe.Exists(ctx, q.Paused())
		known[i] = pipe.SIsMember(ctx, s.ks.Queues(), n)
		specs[i] = queuestat.Spec{Queue: n, Bands: queuestat.AllBands}
	}
	// queuestat.Read adds its commands to the same pipeline and sends it all at once.
	stats, err := queuestat.Read(ctx, pipe, s.ks, specs, s.now())
	if err != nil {
		return nil, nil, err
	}
	out := make([]queueView, len(names))
	isKnown := make([]bool, len(names))
	for i, st := range stats {
		v := queueView{QueueInfo: client.QueueInfo{Queue: names[i], Priorities: []client.BandInfo{}}}
		if st.Err != nil {
			v.Error = st.Err.Error()
		} else if err := firstErr(sched[i], retrying[i], paused[i], known[i]); err != nil {
			v.Error = err.Error()
		} else if tp, err := throughput[i](); err != nil {
			v.Error = err.Error()
		} else {
			v.Paused, v.Scheduled, v.DueNow, v.Dead = paused[i].Val() == 1, sched[i].Val(), st.DueNow, st.Dead
			v.Retrying, v.Throughput = retrying[i].Val(), tp
			for p := keys.MaxPriority; p >= 0; p-- {
				b := st.Band[p]
				v.Priorities = append(v.Priorities, client.BandInfo{Priority: p, Lag: b.Lag, Pending: b.Pending})
				v.Lag = queuestat.Add(v.Lag, b.Lag)
				v.Pending = queuestat.Add(v.Pending, b.Pending)
			}
		}
		isKnown[i] = known[i].Val()
		out[i] = v
	}
	return out, isKnown, nil
}

func firstErr(cmds ...redis.Cmder) error {
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) queues(c echo.Context) error {
	all, err := s.rdb.SMembers(c.Request().Context(), s.ks.Queues()).Result()
	if err != nil {
		return err
	}
	// A name no enqueue could have made (someone else's write) is left out.
	names := slices.DeleteFunc(all, func(n string) bool { return keys.ValidQueue(n) != nil })
	slices.Sort(names)
	views, _, err := s.readQueues(c, names)
	if err != nil {
		return err
	}
	if views == nil {
		views = []queueView{}
	}
	return c.JSON(http.StatusOK, map[string]any{"queues": views})
}

func (s *Server) queueParam(c echo.Context) (string, error) {
	q := c.Param("q")
	if err := keys.ValidQueue(q); err != nil {
		return "", fail(http.StatusBadRequest, "bad_queue", "queue: %s", err)
	}
	return q, nil
}

func (s *Server) queue(c echo.Context) error {
	q, err := s.queueParam(c)
	if err != nil {
		return err
	}
	views, known, err := s.readQueues(c, []string{q})
	if err != nil {
		return err
	}
	v := views[0]
	// Unknown: not in the queues set and nothing there (the set can be lost and heals
	// within seconds; a queue that holds anything is never a 404).
	if !known[0] && v.Error == "" && !v.Paused && v.Lag == 0 && v.Pending == 0 && v.Scheduled == 0 && v.Dead == 0 {
		return fail(http.StatusNotFound, "queue_not_found", "queue %s: no such queue", q)
	}
	if v.Error == "" {
		// the limits with their use, as dtq inspect queue and dtq limit list show them
		if v.Limits, err = s.c.Limits(c.Request().Context(), q); err != nil {
			v.Error = err.Error()
		}
	}
	return c.JSON(http.StatusOK, v)
}

func (s *Server) tasks(c echo.Context) error {
	q, err := s.queueParam(c)
	if err != nil {
		return err
	}
	o := client.ListOptions{State: client.Status(c.QueryParam("state")), Band: -1, Cursor: c.QueryParam("cursor")}
	if o.State == "" {
		o.State = client.StateQueued
	}
	if !slices.Contains(client.ListStates, o.State) {
		if o.State == client.StatusCancelled {
			return fail(http.StatusBadRequest, "bad_state", "state: %q cannot be listed (cancelled records are not indexed); one of queued, running, scheduled, retrying, dead, succeeded", o.State)
		}
		return fail(http.StatusBadRequest, "bad_state", "state: %q must be one of queued, running, scheduled, retrying, dead, succeeded", o.State)
	}
	if b := c.QueryParam("band"); b != "" {
		n, err := strconv.Atoi(b)
		if err != nil || n < 0 || n > keys.MaxPriority {
			return fail(http.StatusBadRequest, "bad_band", "band: %q must be a priority 0..%d", b, keys.MaxPriority)
		}
		if o.State != client.StateQueued && o.State != client.StateRunning {
			return fail(http.StatusBadRequest, "bad_band", "band: only queued and running tasks are listed by band")
		}
		o.Band = n
	}
	o.Limit = client.DefaultListLimit
	if l := c.QueryParam("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > client.MaxListLimit {
			return fail(http.StatusBadRequest, "bad_limit", "limit: %q must be 1..%d", l, client.MaxListLimit)
		}
		o.Limit = n
	}
	page, err := s.c.List(c.Request().Context(), q, o)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"queue": q, "state": o.State, "items": page.Items, "next_cursor": page.Next})
}

// body is a payload or result as the task answer shows it.
type body struct {
	Encoding  string `json:"encoding"` // json (pretty-printed), text (valid UTF-8) or hex
	Size      int    `json:"size"`     // bytes stored
	Truncated bool   `json:"truncated"`
	Value     string `json:"value"` // of at most MaxBodyBytes bytes stored
}

func render(b []byte) body {
	out := body{Size: len(b)}
	if len(b) <= MaxBodyBytes && json.Valid(b) && len(bytes.TrimSpace(b)) > 0 {
		var buf bytes.Buffer
		if json.Indent(&buf, b, "", "  ") == nil {
			out.Encoding, out.Value = "json", buf.String()
			return out
		}
	}
	shown := b
	if len(shown) > MaxBodyBytes {
		shown, out.Truncated = shown[:MaxBodyBytes], true
		// cut at a character boundary, so text stays text
		for i := 0; i < utf8.UTFMax && len(shown) > 0 && !utf8.Valid(shown); i++ {
			shown = shown[:len(shown)-1]
		}
	}
	if utf8.Valid(shown) {
		out.Encoding, out.Value = "text", string(shown)
		return out
	}
	if len(b) > MaxBodyBytes {
		shown = b[:MaxBodyBytes]
	}
	out.Encoding, out.Value = "hex", hex.EncodeToString(shown)
	return out
}

type taskView struct {
	client.TaskInfo
	Payload body  `json:"payload"`
	Result  *body `json:"result,omitempty"`
}

func (s *Server) idParam(c echo.Context) (string, error) {
	id := c.Param("id")
	if err := client.ValidID(id); err != nil {
		return "", fail(http.StatusBadRequest, "bad_id", "id: %q must match [A-Za-z0-9_.:-]{1,128}", id)
	}
	return id, nil
}

func (s *Server) task(c echo.Context) error {
	q, err := s.queueParam(c)
	if err != nil {
		return err
	}
	id, err := s.idParam(c)
	if err != nil {
		return err
	}
	ti, err := s.c.Get(c.Request().Context(), q, id)
	if err != nil {
		return err
	}
	v := taskView{TaskInfo: *ti, Payload: render([]byte(ti.Payload))}
	if ti.Result != "" {
		r := render([]byte(ti.Result))
		v.Result = &r
	}
	return c.JSON(http.StatusOK, v)
}

func (s *Server) pause(c echo.Context) error  { return s.setPaused(c, true) }
func (s *Server) resume(c echo.Context) error { return s.setPaused(c, false) }

// setPaused pauses or resumes the queue named in the path.
func (s *Server) setPaused(c echo.Context, paused bool) error {
	q, err := s.queueParam(c)
	if err != nil {
		return err
	}
	set, what := s.c.Resume, "resumed"
	if paused {
		set, what = s.c.Pause, "paused"
	}
	if err := set(c.Request().Context(), q); err != nil {
		return err
	}
	s.log.Info("observer: queue "+what, "queue", q, "remote", c.Request().RemoteAddr)
	return c.JSON(http.StatusOK, map[string]any{"queue": q, "paused": paused})
}

// cancel cancels a waiting task or asks a running one to stop: the answer's "cancel" is
// "cancelled" or "requested" (status "running": its worker stops it at its next
// heartbeat).
func (s *Server) cancel(c echo.Context) error {
	q, err := s.queueParam(c)
	if err != nil {
		return err
	}
	id, err := s.idParam(c)
	if err != nil {
		return err
	}
	out, err := s.c.CancelTask(c.Request().Context(), q, id)
	if err != nil {
		return err
	}
	status := client.StatusCancelled
	if out == client.CancelRequested {
		status = client.StatusRunning
	}
	s.log.Info("observer: task cancel "+string(out), "queue", q, "id", id, "remote", c.Request().RemoteAddr)
	return c.JSON(http.StatusOK, map[string]any{"queue": q, "id": id, "status": status, "cancel": out})
}

func (s *Server) requeue(c echo.Context) error {
	return s.taskAction(c, s.c.Requeue, "dead task requeued", client.StatusQueued)
}

// taskAction runs act on the task named in the path and answers with its new status.
func (s *Server) taskAction(c echo.Context, act func(ctx context.Context, queue, id string) error, what string, status client.Status) error {
	q, err := s.queueParam(c)
	if err != nil {
		return err
	}
	id, err := s.idParam(c)
	if err != nil {
		return err
	}
	if err := act(c.Request().Context(), q, id); err != nil {
		return err
	}
	s.log.Info("observer: "+what, "queue", q, "id", id, "remote", c.Request().RemoteAddr)
	return c.JSON(http.StatusOK, map[string]any{"queue": q, "id": id, "status": status})
}
