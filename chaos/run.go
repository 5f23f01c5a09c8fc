package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/service"
)

// Options size a chaos run. The zero value is a CI-sized run; every field has a default.
type Options struct {
	// RedisURL is the Redis the workers use. Empty: Run starts its own redis-server
	// (AOF on, appendfsync always) in Dir, which RedisRestarts needs.
	RedisURL string
	// Prefix of every key ("chaos-<run id>" when empty, so runs never mix).
	Prefix string
	// Dir holds the ledger, the worker logs and the AOF. Empty: a temporary directory,
	// removed when the run holds every invariant and kept (Report.Dir) when not.
	Dir string

	Workers     int      // worker processes (4)
	Concurrency int      // DTQ_WORKER_CONCURRENCY of each (8)
	Queues      []string // queues, every worker serves all, in a different order (3 queues)
	Tasks       int      // tasks enqueued (2000)
	// EnqueueFor spreads the enqueues over this long (15s); faults start with it.
	EnqueueFor time.Duration
	// FaultEvery is the mean gap between two faults (1.5s, jittered ±50%).
	FaultEvery time.Duration

	Kills       int // SIGKILL of a random worker, restarted (3)
	Terms       int // SIGTERM (drain), then a new process: a rolling restart (3)
	Freezes     int // SIGSTOP of the worker running a probe task until a peer reclaimed it (2)
	LeaderKills int // SIGKILL of the scheduler leader (1)
	// RedisRestarts kill -9 redis-server and restart it on its AOF (0; needs RedisURL "").
	RedisRestarts int
	// ConnCuts drop every worker connection at once; ReplyCuts drop a connection as the
	// reply to a claim, a completion or a blocking read arrives. Either routes the
	// workers through a fault proxy (0, 0).
	ConnCuts, ReplyCuts int
	// Outages make Redis unreachable through the proxy for 0.3–1s (connections dropped,
	// new ones refused); Delays slow every packet by 5–50 ms for 2 s.
	Outages, Delays int
	// LongOutages make Redis unreachable through the proxy for twice the visibility
	// timeout: a live worker's tasks may then be taken over (ReexecOutage).
	LongOutages int
	// Bursts enqueue, in one EnqueueMany call, a few tasks on every band of every queue:
	// entries one script call adds in one millisecond share their id on every stream.
	Bursts int
	// Pauses pause a queue (client.Pause), enqueue a task on each of its bands, and
	// resume it 1–2 s later: no task of the queue may start in between.
	Pauses int
	// BrokenKeys turn one band stream of one queue into a string for about a second,
	// its content set aside and put back after; BrokenSchedules do the same to one
	// queue's schedule zset.
	BrokenKeys, BrokenSchedules int
	// RegistryDeletes delete PREFIX:queues, three times 300 ms apart. With it, odd
	// worker slots serve one queue fewer, so a leader may rely on the registry.
	RegistryDeletes int
	// Cancels each cancel (client.CancelTask) up to three running tasks and one other,
	// racing their completions (0).
	Cancels int
	// ConcLimit, when above 0, sets fleet-wide concurrency limits of that many before the
	// workers start: on the whole first queue and on the "sleep" function of the second.
	// The ledger then shows whether the limit was reached and never passed, and the
	// limits' running sets must be empty at the end (0).
	ConcLimit int
	// LongShare is the share of tasks that sleep 2–3× the visibility timeout (0: 2%;
	// negative: none).
	LongShare float64
	// StrictOutages makes a re-execution after a long outage of a worker that stayed
	// alive a violation (it is counted, ReexecOutage, either way).
	StrictOutages bool
	// InProcess runs the workers as goroutines of this process instead of processes:
	// only Redis faults apply, and a test can check for leaked goroutines afterwards.
	InProcess bool

	VisibilityTimeout time.Duration // DTQ_VISIBILITY_TIMEOUT_S (3s)
	HeartbeatInterval time.Duration // DTQ_HEARTBEAT_INTERVAL_S (300ms)
	DrainTimeout      time.Duration // DTQ_DRAIN_TIMEOUT_S (15s: longer than any task)
	// Deadline bounds the wait for every task to end, from the last enqueue, fault or
	// due time of a delayed task (3m).
	Deadline time.Duration

	// WorkerCommand starts one worker process; it gets the configuration in DTQ_*
	// variables and DTQ_CHAOS_WORKER=1. Default: this binary again (os.Args[0]), which
	// must call MaybeWorker first thing.
	WorkerCommand []string
	WorkerEnv     []string // extra environment for the workers
	Seed          uint64   // 0: random
	Log           io.Writer
}

// Report is what a run did and found.
type Report struct {
	Seed        uint64   `json:"seed"`
	Workers     int      `json:"workers"`
	Concurrency int      `json:"concurrency"`
	Queues      []string `json:"queues"`
	Tasks       int      `json:"tasks"`
	Delayed     int      `json:"delayed"`

	Kills         int `json:"kills"`
	LeaderKills   int `json:"leader_kills"`
	Terms         int `json:"terms"`
	Freezes       int `json:"freezes"`
	RedisRestarts int `json:"redis_restarts"`
	ConnCuts      int `json:"conn_cuts"`  // connections dropped by CutAll faults
	ReplyCuts     int `json:"reply_cuts"` // replies dropped after Redis applied the command
	Outages       int `json:"outages"`    // Redis unreachable for a while
	Delays        int `json:"delays"`     // traffic slowed for a while
	LongOutages   int `json:"long_outages"`
	Bursts        int `json:"bursts"`
	// SharedEntryIDs counts the entries of bursts whose id another stream holds too.
	SharedEntryIDs int `json:"shared_entry_ids"`
	Pauses         int `json:"pauses"`
	// PauseReturned counts deliveries a worker got while its queue was paused and put
	// back unstarted (TASK_RETURNED_PAUSED events; a lower bound, events are best-effort).
	PauseReturned   int `json:"pause_returned"`
	BrokenKeys      int `json:"broken_keys"`
	BrokenSchedules int `json:"broken_schedules"`
	// BrokenHeld counts entries or schedule items set aside with a broken key (they ran
	// after it was mended).
	BrokenHeld      int `json:"broken_held"`
	RegistryDeletes int `json:"registry_deletes"`
	Cancels         int `json:"cancels"`
	// Limits: per concurrency limit (ConcLimit), what the ledger and its running set say.
	Limits []LimitFindings `json:"limits,omitempty"`
	// RegistryStalls counts queues whose delayed task or retry did not move after the
	// registry was deleted (the harness then registered the queues again).
	RegistryStalls int `json:"registry_stalls"`
	// RegistryPartialLeader counts deletions while the scheduler leader did not serve
	// every queue itself: the case where the registry matters.
	RegistryPartialLeader int  `json:"registry_partial_leader"`
	LongTasks             int  `json:"long_tasks"`
	StrictOutages         bool `json:"strict_outages"`
	// LoopRestarts: supervised loop restarts of the workers (in-process runs), during the
	// faults and after them (a crash loop would keep restarting once Redis is healthy).
	LoopRestarts      int `json:"loop_restarts"`
	LoopRestartsAfter int `json:"loop_restarts_after_faults"`
	Crashes           int `json:"crashes"`    // worker processes that exited on their own
	DataRaces         int `json:"data_races"` // race detector reports in worker logs
	Leftover          int `json:"leftover"`   // entries, pending entries or schedule items left at the end
	// FreezeNotReclaimed counts frozen workers whose task no peer took over in time.
	FreezeNotReclaimed int  `json:"freeze_not_reclaimed"`
	Quiesced           bool `json:"quiesced"`
	Findings

	Elapsed time.Duration `json:"elapsed_ns"`
	Quiesce time.Duration `json:"quiesce_ns"` // from the last fault, enqueue or due time to every task ended
	Faults  []Fault       `json:"faults"`
	Dir     string        `json:"dir,omitempty"`
}

// ErrInvariant is returned (wrapped) by Run when the run broke an invariant.
var ErrInvariant = errors.New("chaos: invariant broken")

// Violations lists every broken invariant; empty when all hold.
func (r Report) Violations() []string {
	v := r.Findings.Violations()
	if r.Crashes > 0 {
		v = append(v, fmt.Sprintf("%d worker processes crashed", r.Crashes))
	}
	if r.DataRaces > 0 {
		v = append(v, fmt.Sprintf("%d data races reported by workers", r.DataRaces))
	}
	if !r.Quiesced {
		v = append(v, "the run did not quiesce before the deadline")
	}
	if r.FreezeNotReclaimed > 0 {
		v = append(v, fmt.Sprintf("%d frozen workers' tasks not reclaimed", r.FreezeNotReclaimed))
	}
	if r.Leftover > 0 {
		v = append(v, fmt.Sprintf("%d stream entries or schedule items left over", r.Leftover))
	}
	for _, l := range r.Limits {
		if l.Exceeded > 0 {
			v = append(v, fmt.Sprintf("limit %s: %d starts past it (peak %d)", l.Scope, l.Exceeded, l.Peak))
		}
		if l.Leaked > 0 {
			v = append(v, fmt.Sprintf("limit %s: %d slots still held once every task had ended", l.Scope, l.Leaked))
		}
	}
	if r.RegistryStalls > 0 {
		v = append(v, fmt.Sprintf("%d queues whose delayed tasks stopped moving when the registry was deleted", r.RegistryStalls))
	}
	if r.StrictOutages && r.ReexecOutage > 0 {
		v = append(v, fmt.Sprintf("%d re-executions of live workers' tasks after long outages", r.ReexecOutage))
	}
	return v
}

// String is the summary a person reads.
func (r Report) String() string {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	p("chaos run (seed %d): %d workers × %d, queues %s", r.Seed, r.Workers, r.Concurrency, strings.Join(r.Queues, ","))
	p("  tasks             %d (%d delayed), %d executions", r.Tasks, r.Delayed, r.Executions)
	p("  faults            %d kills, %d leader kills, %d SIGTERM restarts, %d freezes, %d redis restarts, %d connection drops, %d reply drops, %d outages, %d long outages, %d slowdowns",
		r.Kills, r.LeaderKills, r.Terms, r.Freezes, r.RedisRestarts, r.ConnCuts, r.ReplyCuts, r.Outages, r.LongOutages, r.Delays)
	p("  keyspace, client  %d bursts (%d entries whose id another stream holds too), %d pauses, %d broken band streams and %d broken schedules (%d items held back), %d registry deletions",
		r.Bursts, r.SharedEntryIDs, r.Pauses, r.BrokenKeys, r.BrokenSchedules, r.BrokenHeld, r.RegistryDeletes)
	p("  long tasks        %d (2–3× the visibility timeout), %d re-executed (%d unexplained)", r.LongTasks, r.LongReexec, r.LongUnexplained)
	if r.Cancels > 0 {
		p("  cancels           %d rounds: %d found waiting, %d running (%d of them ended cancelled, the others finished first), %d too late; %d starts after a cancel, %d unasked, %d contradicted (violations)",
			r.Cancels, r.CancelsDone, r.CancelsRequested, r.CancelledRunning, r.CancelsTooLate, r.CancelStarts, r.CancelUnasked, r.CancelBroken)
	}
	for _, l := range r.Limits {
		p("  limit             %s: %d executions, peak %d current attempts (%d with fenced executions still running, for %s at most), %d starts past it (violations), %d slots left (violations); %d executions killed, their tasks running again %s after the kill at most",
			l.Scope, l.Executions, l.Peak, l.ZombiePeak, l.ZombieFor.Round(time.Millisecond), l.Exceeded, l.Leaked, l.Killed, l.SlotReturn.Round(time.Millisecond))
	}
	p("  pauses            %d starts in a pause window: %d started in Redis before it, %d claimed while Pause was being sent, %d after it (violations); %d deliveries put back unstarted",
		r.PauseHeld+r.PauseStraddle+r.PauseStarts, r.PauseHeld, r.PauseStraddle, r.PauseStarts, r.PauseReturned)
	p("  registry          %d deletions, %d while the leader did not serve every queue; %d queues whose delayed task or retry did not move within 10 s (violations)",
		r.RegistryDeletes, r.RegistryPartialLeader, r.RegistryStalls)
	p("  broken keys       %d queues that started nothing while another queue's key was broken (violations); %d probes handed to a gone worker's registration (the leader's rescue ran them)", r.BrokenStalls, r.BrokenProbesHandedDead)
	p("  outcome           %d succeeded, %d dead (%d planned, %d out of retries after lost workers)", r.Succeeded, r.Dead, r.DeadPlanned, r.DeadWorkerLost)
	p("  lost              %d (%d left retrying by a failure recorded while their schedule was broken)", r.Lost, r.LostBrokenSchedule)
	p("  duplicate starts  %d", r.DuplicateStarts)
	p("  re-executions     %d (kill %d, freeze %d, drain deadline %d, worker cut off by a Redis fault %d, live worker's task after a long outage %d, unexplained %d)", r.Reexecutions, r.ReexecKill, r.ReexecFreeze, r.ReexecTerm, r.ReexecRedis, r.ReexecOutage, r.Unexplained)
	p("  late completions  %d fenced off (frozen or cut-off workers finishing after a peer took over)", r.LateFinishes)
	p("  retries           %d (planned failures)", r.Retries)
	p("  skipped attempts  %d (claimed, never started: worker killed between claim and start, or reply lost)", r.SkippedAttempts)
	p("  crashes           %d, data races %d, leftover %d", r.Crashes, r.DataRaces, r.Leftover)
	if r.LoopRestarts > 0 {
		p("  loop restarts     %d during and right after the faults, %d in a healthy batch after the run settled", r.LoopRestarts-r.LoopRestartsAfter, r.LoopRestartsAfter)
	}
	p("  quiesce           %s after the last fault, enqueue and due time (run %s)", r.Quiesce.Round(time.Millisecond), r.Elapsed.Round(time.Millisecond))
	if v := r.Violations(); len(v) > 0 {
		p("  VIOLATIONS        %s", strings.Join(v, "; "))
		for _, s := range r.Problems {
			p("    %s", s)
		}
		if r.Dir != "" {
			p("  ledger and logs   %s", r.Dir)
		}
	} else {
		p("  invariants        all hold")
	}
	return b.String()
}

func (o *Options) defaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Workers, 4)
	def(&o.Concurrency, 8)
	def(&o.Tasks, 2000)
	if len(o.Queues) == 0 {
		o.Queues = []string{"alpha", "beta", "gamma"}
	}
	defD(&o.EnqueueFor, 15*time.Second)
	defD(&o.FaultEvery, 1500*time.Millisecond)
	defD(&o.VisibilityTimeout, 3*time.Second)
	defD(&o.HeartbeatInterval, 300*time.Millisecond)
	defD(&o.DrainTimeout, 15*time.Second)
	defD(&o.Deadline, 3*time.Minute)
	if o.LongShare == 0 {
		o.LongShare = 0.02
	}
	if o.Kills == 0 && o.Terms == 0 && o.Freezes == 0 && o.LeaderKills == 0 && o.RedisRestarts == 0 &&
		o.ConnCuts == 0 && o.ReplyCuts == 0 && o.Outages == 0 && o.Delays == 0 && o.LongOutages == 0 &&
		o.Bursts == 0 && o.Pauses == 0 && o.BrokenKeys == 0 && o.BrokenSchedules == 0 && o.RegistryDeletes == 0 && o.Cancels == 0 {
		if o.InProcess {
			o.RedisRestarts, o.ConnCuts, o.ReplyCuts, o.Outages, o.Delays = 2, 3, 6, 1, 1
		} else {
			o.Kills, o.Terms, o.Freezes, o.LeaderKills = 3, 3, 2, 1
		}
	}
	if len(o.WorkerCommand) == 0 {
		o.WorkerCommand = []string{os.Args[0]}
	}
	if o.Seed == 0 {
		o.Seed = mrand.Uint64()
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// harness is one run in progress.
type harness struct {
	o         Options
	runID     string
	ledgerDir string
	rng       *mrand.Rand
	rngMu     sync.Mutex
	start     time.Time
	say       func(string, ...any)

	srv   *redisServer
	proxy *Proxy
	rdb   *redis.Client
	c     *client.Client
	ks    keys.Space
	sup   *supervisor
	ip    *inproc

	queuesOf func(slot int) string

	// enqMu is held by each enqueue call with its bookkeeping, and by a pause around its
	// snapshots: no task is created that the snapshots cannot see.
	enqMu  sync.Mutex
	mu     sync.Mutex
	specs  []Spec
	faults []Fault
	rep    Report
	broken *brokenKey // the key a BrokenKeys fault holds broken, nil when none
}

// Run runs worker processes under faults while tasks flow, waits until every task has
// ended (or the deadline), and checks the invariants of docs/design.md against the ledger the
// functions wrote and the task records. It returns the report, and an error wrapping
// ErrInvariant when an invariant broke (or another error when the run itself failed).
func Run(ctx context.Context, o Options) (Report, error) {
	o.defaults()
	if o.InProcess && o.Kills+o.Terms+o.Freezes+o.LeaderKills > 0 {
		return Report{}, errors.New("chaos: in-process workers take Redis faults only (no kills, terms or freezes)")
	}
	if o.RedisRestarts > 0 && o.RedisURL != "" {
		return Report{}, errors.New("chaos: RedisRestarts needs a redis-server of the run's own (RedisURL empty)")
	}
	for _, q := range o.Queues {
		if err := keys.ValidQueue(q); err != nil {
			return Report{}, fmt.Errorf("chaos: %w", err)
		}
	}
	var rid [3]byte
	_, _ = rand.Read(rid[:])
	runID := "c" + hex.EncodeToString(rid[:])
	if o.Prefix == "" {
		o.Prefix = "chaos-" + runID
	}
	h := &harness{o: o, runID: runID, rng: mrand.New(mrand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15)), start: time.Now(), ks: keys.New(o.Prefix)}
	h.say = func(f string, a ...any) {
		fmt.Fprintf(o.Log, "%7.3fs  %s\n", time.Since(h.start).Seconds(), fmt.Sprintf(f, a...))
	}
	h.rep = Report{Seed: o.Seed, Workers: o.Workers, Concurrency: o.Concurrency, Queues: o.Queues, StrictOutages: o.StrictOutages}
	dir, removeDir := o.Dir, false
	if dir == "" {
		d, err := os.MkdirTemp("", "dtq-chaos-")
		if err != nil {
			return h.rep, err
		}
		dir, removeDir = d, true
	}
	rep, err := h.run(ctx, dir)
	if removeDir && err == nil {
		_ = os.RemoveAll(dir)
	} else {
		rep.Dir = dir
	}
	return rep, err
}

func (h *harness) intn(n int) int {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.IntN(n)
}

func (h *harness) float() float64 {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.Float64()
}

func (h *harness) jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.5 + h.float()))
}

func (h *harness) run(ctx context.Context, dir string) (Report, error) {
	o := h.o
	ledgerDir := filepath.Join(dir, "ledger")
	h.ledgerDir = ledgerDir
	if err := os.MkdirAll(ledgerDir, 0o755); err != nil {
		return h.rep, err
	}
	redisURL := o.RedisURL
	if redisURL == "" {
		rdir := filepath.Join(dir, "redis")
		if err := os.MkdirAll(rdir, 0o755); err != nil {
			return h.rep, err
		}
		srv, err := startRedis(rdir)
		if err != nil {
			return h.rep, err
		}
		defer srv.stop()
		h.srv = srv
		redisURL = "redis://" + srv.addr()
		h.say("redis-server on %s (AOF, appendfsync always)", srv.addr())
	}
	ropt, err := redis.ParseURL(redisURL)
	if err != nil {
		return h.rep, fmt.Errorf("chaos: RedisURL: %w", err)
	}
	h.rdb = redis.NewClient(ropt)
	defer h.rdb.Close()
	h.c = client.New(h.rdb, client.Options{Prefix: o.Prefix})
	if err := h.setLimits(ctx); err != nil {
		return h.rep, err
	}
	workerURL := redisURL
	if o.ConnCuts > 0 || o.ReplyCuts > 0 || o.Outages > 0 || o.Delays > 0 || o.LongOutages > 0 {
		p, err := NewProxy(ropt.Addr)
		if err != nil {
			return h.rep, err
		}
		defer p.Close()
		h.proxy = p
		u, _ := url.Parse(redisURL)
		u.Host = p.Addr()
		workerURL = u.String()
		h.say("workers reach Redis through a fault proxy on %s", p.Addr())
	}

	queuesOf := func(slot int) string {
		qs := append([]string(nil), o.Queues...)
		for i := 0; i < slot%len(qs); i++ {
			qs = append(qs[1:], qs[0])
		}
		if o.RegistryDeletes > 0 && slot%2 == 1 && len(qs) > 1 {
			// A worker that does not serve a queue schedules it only as long as the
			// registry names it: the case a deleted registry can break.
			qs = qs[:len(qs)-1]
		}
		return strings.Join(qs, ",")
	}
	secs := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }
	h.sup = &supervisor{argv: o.WorkerCommand, dir: dir, id: h.runID, procs: map[int]*proc{}}
	h.sup.env = append([]string{
		"DTQ_REDIS_URL=" + workerURL,
		"DTQ_KEY_PREFIX=" + o.Prefix,
		"DTQ_WORKER_CONCURRENCY=" + strconv.Itoa(o.Concurrency),
		"DTQ_VISIBILITY_TIMEOUT_S=" + secs(o.VisibilityTimeout),
		"DTQ_HEARTBEAT_INTERVAL_S=" + secs(o.HeartbeatInterval),
		"DTQ_DRAIN_TIMEOUT_S=" + secs(o.DrainTimeout),
		"DTQ_SCHEDULER_INTERVAL_S=0.2",
		"DTQ_SCHEDULER_LOCK_TTL_MS=" + strconv.FormatInt(max(1000, o.VisibilityTimeout.Milliseconds()/2), 10),
		"DTQ_RETRY_BASE_MS=50", "DTQ_RETRY_MAX_MS=400",
		"DTQ_RESULT_TTL_S=0",
		"DTQ_POLL_BLOCK_MS=1000",
		"DTQ_EVENTS_MAXLEN=100000",
		"DTQ_LOG_LEVEL=warn", "DTQ_LOG_FORMAT=json",
		"PORT=0",
		EnvLedger + "=" + ledgerDir,
	}, o.WorkerEnv...)
	defer h.sup.killAll()
	if o.InProcess {
		h.ip = &inproc{env: h.sup.env, dir: ledgerDir, logDir: dir}
	}
	h.queuesOf = queuesOf
	for slot := 0; slot < o.Workers; slot++ {
		if _, err := h.startSlot(slot); err != nil {
			return h.rep, err
		}
	}
	if o.InProcess {
		h.say("%d in-process workers started", o.Workers)
	} else {
		h.say("%d worker processes started", o.Workers)
	}

	// Enqueues and faults run side by side; the run quiesces after both.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var enqErr, faultErr error
	wg.Add(2)
	go func() { defer wg.Done(); enqErr = h.enqueueAll(rctx) }()
	go func() { defer wg.Done(); faultErr = h.injectAll(rctx) }()
	wg.Wait()
	if err := errors.Join(enqErr, faultErr); err != nil {
		return h.rep, err
	}
	calm := time.Now()
	h.say("all %d tasks enqueued and all faults injected; waiting for every task to end", len(h.specs))
	// Time to quiesce, and the deadline, count from the last fault, enqueue or due time
	// of a delayed task, whichever comes last: waiting for a task's due time is the
	// schedule, not recovery.
	from := calm
	h.mu.Lock()
	for _, s := range h.specs {
		if s.RunAt.After(from) {
			from = s.RunAt
		}
	}
	h.mu.Unlock()
	h.rep.Quiesced = h.waitQuiet(ctx, time.Until(from)+o.Deadline)
	h.rep.Quiesce = max(0, time.Since(from))
	h.say("quiesced=%v %s after the last fault, enqueue and due time", h.rep.Quiesced, h.rep.Quiesce.Round(time.Millisecond))
	if h.ip != nil {
		// A crash loop shows as loops restarting while Redis is healthy: count the
		// restarts while the workers run one more batch after everything settled.
		before := h.ip.loopRestarts()
		if h.rep.Quiesced {
			if err := h.finalBatch(ctx); err != nil {
				return h.rep, err
			}
			h.rep.Quiesced = h.waitQuiet(ctx, o.Deadline)
		}
		h.rep.LoopRestarts = h.ip.loopRestarts()
		h.rep.LoopRestartsAfter = h.rep.LoopRestarts - before
		h.say("stopping workers")
		h.ip.stopAll(o.DrainTimeout + 10*time.Second)
	} else {
		for _, p := range h.sup.current() {
			h.waitReady(ctx, p)
		}
		h.sup.stopAll(o.DrainTimeout + 10*time.Second)
	}

	return h.finish(ctx, ledgerDir)
}

// startSlot starts the next process of a slot; each slot serves the queues in its own order.
func (h *harness) startSlot(slot int) (*proc, error) {
	if h.ip != nil {
		return nil, h.ip.start(slot, "DTQ_QUEUES="+h.queuesOf(slot))
	}
	return h.sup.start(slot, "DTQ_QUEUES="+h.queuesOf(slot))
}

// finalBatch enqueues a last 50 quick tasks once the run has settled.
func (h *harness) finalBatch(ctx context.Context) error {
	specs := make([]Spec, 50)
	tasks := make([]client.Task, 50)
	for i := range specs {
		q := h.o.Queues[i%len(h.o.Queues)]
		specs[i] = Spec{Queue: q, ID: fmt.Sprintf("final%03d", i), Function: "noop", Priority: i % 10, MaxRetries: 3}
		tasks[i] = client.Task{Queue: q, ID: specs[i].ID, Function: "noop", Priority: i % 10, MaxRetries: client.Retries(3)}
	}
	return h.enqueue(ctx, specs, tasks)
}

// spec draws one task of the mix.
func (h *harness) spec(seq int) (Spec, client.Task) {
	o := h.o
	s := Spec{Queue: o.Queues[h.intn(len(o.Queues))], ID: fmt.Sprintf("t%06d", seq), Priority: h.intn(10), MaxRetries: 3}
	t := client.Task{Queue: s.Queue, ID: s.ID, Priority: s.Priority}
	x := h.float()
	if h.float() < o.LongShare {
		// Longer than the visibility timeout: only its heartbeats keep it from being
		// taken over; a live worker's long task must never run twice.
		s.Function, s.Long = "sleep", true
		ms := 2*o.VisibilityTimeout.Milliseconds() + int64(h.intn(int(o.VisibilityTimeout.Milliseconds())+1))
		t.Payload = []byte(fmt.Sprintf(`{"ms":%d}`, ms))
		x = 2 // none of the cases below
	}
	switch {
	case x > 1:
	case x < 0.40:
		s.Function, t.Payload = "sleep", []byte(fmt.Sprintf(`{"ms":%d}`, h.intn(150)))
	case x < 0.50:
		s.Function, t.Payload = "sleep", []byte(fmt.Sprintf(`{"ms":%d}`, 300+h.intn(1200)))
	case x < 0.62:
		s.Function = "noop"
	case x < 0.77:
		s.Function, s.Times = "fail", 1+h.intn(2)
	case x < 0.82:
		s.Function, s.Times, s.MaxRetries = "fail", 4, 1
	default:
		s.Function, t.Payload = "sleep", []byte(fmt.Sprintf(`{"ms":%d}`, h.intn(100)))
		t.Delay = 200*time.Millisecond + time.Duration(h.intn(int(o.EnqueueFor/time.Millisecond/3)+1))*time.Millisecond
	}
	if s.Function == "fail" {
		t.Payload = []byte(fmt.Sprintf(`{"times":%d}`, s.Times))
	}
	t.Function = s.Function
	t.MaxRetries = client.Retries(s.MaxRetries)
	h.avoidBroken(&s, &t)
	return s, t
}

// enqueueAll puts the tasks on the queues in waves spread over EnqueueFor.
func (h *harness) enqueueAll(ctx context.Context) error {
	o := h.o
	waves := max(1, int(o.EnqueueFor/(250*time.Millisecond)))
	per := (o.Tasks + waves - 1) / waves
	seq := 0
	tick := time.NewTicker(o.EnqueueFor / time.Duration(waves))
	defer tick.Stop()
	for w := 0; w < waves && seq < o.Tasks; w++ {
		n := min(per, o.Tasks-seq)
		specs := make([]Spec, n)
		tasks := make([]client.Task, n)
		for i := range specs {
			specs[i], tasks[i] = h.spec(seq)
			seq++
		}
		if err := h.enqueue(ctx, specs, tasks); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// enqueue creates the tasks, retrying through Redis faults. The ids are the harness's
// own, so a retry of an enqueue whose reply was lost finds its task (ErrTaskExists)
// instead of creating a second one.
func (h *harness) enqueue(ctx context.Context, specs []Spec, tasks []client.Task) error {
	deadline := time.Now().Add(time.Minute)
	todo := make([]int, len(tasks))
	for i := range todo {
		todo[i] = i
	}
	for len(todo) > 0 {
		batch := make([]client.Task, len(todo))
		for j, i := range todo {
			batch[j] = tasks[i]
		}
		h.enqMu.Lock()
		now := time.Now()
		res, err := h.c.EnqueueMany(ctx, batch)
		var again []int
		for j, i := range todo {
			switch {
			case err != nil, res[j].Err != nil && !errors.Is(res[j].Err, client.ErrTaskExists):
				again = append(again, i)
			default:
				s := specs[i]
				if tasks[i].Delay > 0 {
					// The due time is the record's: an earlier try whose reply was lost
					// may have created the task (this one then found it).
					s.RunAt = now.Add(tasks[i].Delay).Truncate(time.Millisecond)
					if ms, err := h.rdb.HGet(ctx, h.ks.Queue(s.Queue).Task(s.ID), "run_at").Int64(); err == nil && ms > 0 {
						s.RunAt = time.UnixMilli(ms)
					}
					h.mu.Lock()
					h.rep.Delayed++
					h.mu.Unlock()
				}
				h.mu.Lock()
				h.specs = append(h.specs, s)
				h.mu.Unlock()
			}
		}
		h.enqMu.Unlock()
		todo = again
		if len(todo) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: enqueue failed for a minute: %v", err)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

func (h *harness) addFault(f Fault) {
	h.mu.Lock()
	h.faults = append(h.faults, f)
	h.mu.Unlock()
}

// sleepCtx waits d or until ctx ends; it reports whether the full wait elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool { return service.Sleep(ctx, d) }

// waitFor polls cond every 20 ms until it holds, ctx ends or d passes.
func waitFor(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 20*time.Millisecond) {
			return false
		}
	}
}
