package lua_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// wait registers consumer for a hand-off the way an idle worker does: a claim in read
// mode that finds nothing.
func (f *fixture) wait(t *testing.T, consumer string, maxPayload int) {
	t.Helper()
	r := f.claim(t, lua.ClaimArgs{Consumer: consumer, Want: 1, MaxPayload: maxPayload, RegisterUntilMS: f.now + 60_000})
	if len(r.Started) != 0 {
		t.Fatalf("the registering claim started %+v", r.Started)
	}
	if n := f.rdb.ZCard(f.ctx, f.q.Waiting()).Val(); n == 0 {
		t.Fatalf("%s not registered", consumer)
	}
}

// register registers consumer for a hand-off directly, without the claim that would
// first have taken what its queue holds undelivered.
func (f *fixture) register(t *testing.T, consumer string) {
	t.Helper()
	if err := f.rdb.XGroupCreateMkStream(f.ctx, f.q.Inbox(consumer), keys.Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.ZAdd(f.ctx, f.q.Waiting(), redis.Z{Score: float64(f.now + 60_000), Member: lua.WaitingMember(1<<20, consumer)}).Err(); err != nil {
		t.Fatal(err)
	}
}

// inbox reads consumer's inbox as its blocking read does.
func (f *fixture) inbox(t *testing.T, consumer string) []lua.Handoff {
	t.Helper()
	xs, err := f.rdb.XReadGroup(f.ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: consumer,
		Streams: []string{f.q.Inbox(consumer), ">"}, Block: -1}).Result()
	if err == redis.Nil {
		return nil
	}
	if err != nil {
		t.Fatalf("read inbox: %v", err)
	}
	var out []lua.Handoff
	for _, m := range xs[0].Messages {
		h, err := lua.DecodeHandoff(m.ID, m.Values)
		if err != nil {
			t.Fatalf("decode %v: %v", m, err)
		}
		out = append(out, h)
	}
	return out
}

func TestHandoffStartsTaskForWaitingWorker(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.wait(t, "w1", 1<<20)
	f.enqueue(t, lua.NewTask{ID: "h1", Priority: 4, Payload: []byte("pay"), MaxRetries: 3, TimeoutMS: 500})
	for field, want := range map[string]string{"status": "running", "attempt": "1", "worker": "w1", "handback": "1"} {
		if got := f.field(t, "h1", field); got != want {
			t.Fatalf("%s = %q, want %q", field, got, want)
		}
	}
	if p := f.pending(t, 4); p != 1 {
		t.Fatalf("pending on band 4 = %d, want the entry in w1's PEL", p)
	}
	hs := f.inbox(t, "w1")
	if len(hs) != 1 || hs[0].Started == nil {
		t.Fatalf("inbox = %+v, want one started row", hs)
	}
	s := *hs[0].Started
	if s.ID != "h1" || s.Attempt != 1 || s.Band != 4 || s.Payload != "pay" || s.Function != "noop" ||
		s.MaxRetries != 3 || s.TimeoutMS != 500 || s.Entry != f.field(t, "h1", "entry") || s.CreatedMS != f.now {
		t.Fatalf("started row = %+v", s)
	}
	// one hand-off per registration: the next task waits on its stream
	f.enqueue(t, lua.NewTask{ID: "h2"})
	if st := f.field(t, "h2", "status"); st != "queued" {
		t.Fatalf("second task status = %q, want queued", st)
	}
	// the next claim is told the row was received: it is deleted and the mark cleared
	r := f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 1, Received: []lua.Received{{InboxEntry: hs[0].InboxEntry, ID: "h1"}}})
	if len(r.Started) != 1 || r.Started[0].ID != "h2" {
		t.Fatalf("claim = %+v, want h2 started", r)
	}
	if hb := f.field(t, "h1", "handback"); hb != "" {
		t.Fatalf("handback after receipt = %q, want cleared", hb)
	}
	if n := f.rdb.XLen(f.ctx, f.q.Inbox("w1")).Val(); n != 0 {
		t.Fatalf("inbox holds %d rows after receipt", n)
	}
	if p, err := f.rdb.XPending(f.ctx, f.q.Inbox("w1"), keys.Group).Result(); err != nil || p.Count != 0 {
		t.Fatalf("inbox PEL after receipt = %+v, %v; want empty (it would grow with every hand-off)", p, err)
	}
	// fenced completion works as for any claimed task
	ok, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 60_000, Items: []lua.Completion{{ID: "h1", Entry: s.Entry, Band: 4, Attempt: 1, Outcome: lua.Succeeded}}})
	if err != nil || ok[0] != lua.CompleteApplied || f.field(t, "h1", "status") != "succeeded" || f.pending(t, 4) != 0 {
		t.Fatalf("complete = %v, %v; status %q", ok, err, f.field(t, "h1", "status"))
	}
}

func TestClaimReturnsUnreadHandoffs(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.wait(t, "w1", 1<<20)
	f.enqueue(t, lua.NewTask{ID: "u1"})
	r := f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 1})
	if len(r.Started) != 1 || r.Started[0].ID != "u1" || r.Started[0].Attempt != 1 || !r.Started[0].HandedOff {
		t.Fatalf("claim = %+v, want the unread hand-off", r)
	}
	if hb := f.field(t, "u1", "handback"); hb != "" {
		t.Fatalf("handback = %q, want cleared once returned", hb)
	}
	if hs := f.inbox(t, "w1"); len(hs) != 0 {
		t.Fatalf("inbox still holds %+v", hs)
	}
	if p, err := f.rdb.XPending(f.ctx, f.q.Inbox("w1"), keys.Group).Result(); err != nil || p.Count != 0 {
		t.Fatalf("inbox PEL = %+v, %v; want empty", p, err)
	}
	// a claim that started something ends the registration
	if n := f.rdb.ZCard(f.ctx, f.q.Waiting()).Val(); n != 0 {
		t.Fatalf("waiting = %d after a start, want 0", n)
	}
}

func TestNoHandoff(t *testing.T) {
	t.Parallel()
	cases := map[string]func(f *fixture, t *testing.T){
		"paused": func(f *fixture, t *testing.T) {
			f.wait(t, "w1", 1<<20)
			f.rdb.Set(f.ctx, f.q.Paused(), "1", 0)
			f.enqueue(t, lua.NewTask{ID: "x"})
		},
		"payload over the worker's limit": func(f *fixture, t *testing.T) {
			f.wait(t, "w1", 2)
			f.enqueue(t, lua.NewTask{ID: "x", Payload: []byte("too long")})
		},
		"registration lapsed": func(f *fixture, t *testing.T) {
			f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 1, RegisterUntilMS: f.now - 1})
			f.enqueue(t, lua.NewTask{ID: "x"})
		},
		"not registered": func(f *fixture, t *testing.T) {
			f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 1})
			f.enqueue(t, lua.NewTask{ID: "x"})
		},
		"delayed task": func(f *fixture, t *testing.T) {
			f.wait(t, "w1", 1<<20)
			f.enqueue(t, lua.NewTask{ID: "x", RunAtMS: f.now + 60_000})
			if st := f.field(t, "x", "status"); st != "scheduled" {
				t.Fatalf("status = %q, want scheduled", st)
			}
			f.enqueue(t, lua.NewTask{ID: "y", Priority: 5}) // the registration still serves
			if st := f.field(t, "y", "status"); st != "running" {
				t.Fatalf("status of the next task = %q, want running (handed off)", st)
			}
			f.rdb.Del(f.ctx, f.q.Task("x"), f.q.Inbox("w1"))
			f.enqueue(t, lua.NewTask{ID: "x"})
		},
	}
	for name, run := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			run(f, t)
			if st := f.field(t, "x", "status"); st != "queued" {
				t.Fatalf("status = %q, want queued", st)
			}
			if f.rdb.XLen(f.ctx, f.q.Stream(0)).Val() != 1 || f.pending(t, 0) != 0 {
				t.Fatal("the entry is not waiting undelivered on its stream")
			}
			if n := f.rdb.XLen(f.ctx, f.q.Inbox("w1")).Val(); n != 0 {
				t.Fatalf("inbox holds %d rows", n)
			}
		})
	}
}

// An entry left undelivered (the queue was paused) is older than the new one: the
// enqueue delivers the older entry and tells the worker to claim it; the new task
// waits its turn on the stream.
func TestHandoffOfAnOlderEntry(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "old"})
	f.register(t, "w1")
	f.enqueue(t, lua.NewTask{ID: "new"})
	if st := f.field(t, "new", "status"); st != "queued" {
		t.Fatalf("new task status = %q, want queued", st)
	}
	hs := f.inbox(t, "w1")
	if len(hs) != 1 || hs[0].Delivered == nil || hs[0].Delivered.Entry != f.field(t, "old", "entry") {
		t.Fatalf("inbox = %+v, want a delivered row naming the old entry", hs)
	}
	r := f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 0, Delivered: []lua.Delivered{*hs[0].Delivered},
		Received: []lua.Received{{InboxEntry: hs[0].InboxEntry}}})
	if len(r.Started) != 1 || r.Started[0].ID != "old" {
		t.Fatalf("claim = %+v, want the old task started", r)
	}
	r = f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 1})
	if len(r.Started) != 1 || r.Started[0].ID != "new" {
		t.Fatalf("claim = %+v, want the new task started", r)
	}
}

func TestLeaveReturnsUnreadHandoffs(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.wait(t, "w1", 1<<20)
	f.enqueue(t, lua.NewTask{ID: "l1", Priority: 2})
	left, err := lua.Leave.Run(f.ctx, f.rdb, lua.LeaveArgs{Queue: f.q, Consumer: "w1", Tag: "proc1", MaxPayload: 1 << 20})
	if err != nil || len(left) != 1 || left[0].ID != "l1" || left[0].Band != 2 || left[0].Attempt != 1 ||
		left[0].Entry != f.field(t, "l1", "entry") {
		t.Fatalf("leave = %+v, %v", left, err)
	}
	if f.rdb.Exists(f.ctx, f.q.Inbox("w1")).Val() != 0 || f.rdb.ZCard(f.ctx, f.q.Waiting()).Val() != 0 ||
		f.rdb.ZCard(f.ctx, f.q.Handed()).Val() != 0 {
		t.Fatal("inbox, registration or hand-off note left behind")
	}
	// a claim of the leaving process still in flight does not register it again
	f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 1, Tag: "proc1", RegisterUntilMS: f.now + 60_000})
	f.enqueue(t, lua.NewTask{ID: "l2", Priority: 5})
	if st := f.field(t, "l2", "status"); st != "queued" {
		t.Fatalf("status after leave = %q, want queued", st)
	}
	// a new process under the same worker id does
	f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 0, Tag: "proc2", RegisterUntilMS: f.now + 60_000})
	f.enqueue(t, lua.NewTask{ID: "l3", Priority: 6})
	if st := f.field(t, "l3", "status"); st != "running" {
		t.Fatalf("status with a new process registered = %q, want running", st)
	}
}

// A worker that died with a hand-off unread did not fail the task: its reclaim is a
// hand-back's, not a silent death's.
func TestReclaimOfUnreadHandoffIsNoFailure(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.wait(t, "gone", 1<<20)
	f.enqueue(t, lua.NewTask{ID: "d1", MaxRetries: 0})
	idleAll(t, f, 0, "gone", 60_000)
	r := f.claim(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 4, MinIdleMS: 30_000})
	if len(r.Started) != 1 || r.Started[0].ID != "d1" || r.Started[0].Attempt != 2 || r.Started[0].Failures != 0 {
		t.Fatalf("reclaim = %+v, want attempt 2 with no failure counted", r)
	}
	// the dead worker's inbox row no longer names a current execution
	r = f.claim(t, lua.ClaimArgs{Consumer: "gone", Want: 1})
	if len(r.Started) != 0 {
		t.Fatalf("the stale hand-off started again: %+v", r.Started)
	}
}

// Registrations of workers gone without leaving are pruned by the next registration.
func TestLapsedRegistrationsArePruned(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, w := range []string{"gone1", "gone2"} {
		f.claim(t, lua.ClaimArgs{Consumer: w, Want: 1, RegisterUntilMS: f.now - 1})
	}
	f.wait(t, "live", 1<<20)
	got := f.rdb.ZRange(f.ctx, f.q.Waiting(), 0, -1).Val()
	if len(got) != 1 || got[0] != lua.WaitingMember(1<<20, "live") {
		t.Fatalf("waiting = %v, want only the live worker", got)
	}
	if ttl := f.rdb.PTTL(f.ctx, f.q.Inbox("live")).Val(); ttl <= 0 {
		t.Fatalf("inbox ttl = %v, want an expiry", ttl)
	}
}

// An inbox row not as enqueue.lua writes it is refused with a reason, not run.
func TestDecodeHandoffRefusesMalformedRows(t *testing.T) {
	t.Parallel()
	good := map[string]any{"e": "1-0", "b": "3", "i": "t1", "a": "1", "f": "noop", "p": "x", "t": "0", "m": "2", "u": "", "c": "5"}
	if h, err := lua.DecodeHandoff("9-0", good); err != nil || h.Started == nil || h.Started.ID != "t1" || h.Started.Band != 3 || !h.Started.HandedOff {
		t.Fatalf("good row: %+v, %v", h, err)
	}
	for name, row := range map[string]map[string]any{
		"no entry":      {"b": "3", "i": "t1", "a": "1"},
		"band too high": {"e": "1-0", "b": "10", "i": "t1", "a": "1"},
		"band not int":  {"e": "1-0", "b": "x", "i": "t1", "a": "1"},
		"no task":       {"e": "1-0", "b": "3", "a": "1"},
		"bad attempt":   {"e": "1-0", "b": "3", "i": "t1", "a": "one"},
	} {
		if _, err := lua.DecodeHandoff("9-0", row); err == nil || !strings.Contains(err.Error(), "inbox row 9-0") {
			t.Errorf("%s: err = %v, want a refusal naming the row", name, err)
		}
	}
}

// A hand-off the worker never read (it died waiting) is put back on its stream by the
// rescue: the task is queued again at attempt 0 with a new entry, the old delivery is
// gone from the dead worker's PEL, and the next claim starts it as a fresh delivery at
// attempt 1 with no failure counted. A newer hand-off than the cutoff is left alone.
func TestRescueOfUnreadHandoff(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.wait(t, "dead", 1<<20)
	f.enqueue(t, lua.NewTask{ID: "r1", Priority: 3, MaxRetries: 0})
	old := f.field(t, "r1", "entry")
	if n := f.rdb.ZCard(f.ctx, f.q.Handed()).Val(); n != 1 {
		t.Fatalf("hand-offs noted = %d, want 1", n)
	}
	if ids, err := lua.Rescue.Run(f.ctx, f.rdb, lua.RescueArgs{Queue: f.q, NowMS: f.now, CutoffMS: f.now - 1, Limit: 100}); err != nil || len(ids) != 0 {
		t.Fatalf("rescue before the cutoff = %v, %v; want nothing", ids, err)
	}
	if st := f.field(t, "r1", "status"); st != "running" {
		t.Fatalf("status = %q after an early rescue, want running", st)
	}
	ids, err := lua.Rescue.Run(f.ctx, f.rdb, lua.RescueArgs{Queue: f.q, NowMS: f.now, CutoffMS: f.now, Limit: 100})
	if err != nil || len(ids) != 1 || ids[0] != "r1" {
		t.Fatalf("rescue = %v, %v; want r1", ids, err)
	}
	for field, want := range map[string]string{"status": "queued", "attempt": "0", "worker": "", "handback": "", "failures": "0"} {
		if got := f.field(t, "r1", field); got != want {
			t.Fatalf("%s = %q after the rescue, want %q", field, got, want)
		}
	}
	if e := f.field(t, "r1", "entry"); e == old || e == "" {
		t.Fatalf("entry = %q, want a new one (old %s)", e, old)
	}
	if p := f.pending(t, 3); p != 0 {
		t.Fatalf("pending on band 3 = %d, want the dead worker's delivery acked", p)
	}
	if n := f.rdb.XLen(f.ctx, f.q.Stream(3)).Val(); n != 1 {
		t.Fatalf("band 3 holds %d entries, want the new one only", n)
	}
	if n := f.rdb.XLen(f.ctx, f.q.Inbox("dead")).Val(); n != 0 {
		t.Fatalf("the dead worker's inbox holds %d rows", n)
	}
	if n := f.rdb.ZCard(f.ctx, f.q.Handed()).Val(); n != 0 {
		t.Fatalf("hand-offs noted = %d after the rescue, want 0", n)
	}
	r := f.claim(t, lua.ClaimArgs{Consumer: "live", Want: 4})
	if len(r.Started) != 1 || r.Started[0].ID != "r1" || r.Started[0].Attempt != 1 || r.Started[0].Failures != 0 || r.Started[0].HandedOff {
		t.Fatalf("claim = %+v, want r1 as a fresh delivery at attempt 1", r)
	}
	// a second rescue finds nothing more
	if ids, err := lua.Rescue.Run(f.ctx, f.rdb, lua.RescueArgs{Queue: f.q, NowMS: f.now, CutoffMS: f.now + 60_000, Limit: 100}); err != nil || len(ids) != 0 {
		t.Fatalf("second rescue = %v, %v", ids, err)
	}
}

// A hand-off the worker read is its to run: the rescue drops the note and leaves the
// task running. A claim telling the row received drops the note too.
func TestRescueLeavesReadHandoffs(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.wait(t, "w1", 1<<20)
	f.enqueue(t, lua.NewTask{ID: "k1"})
	hs := f.inbox(t, "w1")
	if len(hs) != 1 {
		t.Fatalf("inbox = %+v", hs)
	}
	ids, err := lua.Rescue.Run(f.ctx, f.rdb, lua.RescueArgs{Queue: f.q, NowMS: f.now, CutoffMS: f.now + 60_000, Limit: 100})
	if err != nil || len(ids) != 0 {
		t.Fatalf("rescue = %v, %v; want nothing: the row was read", ids, err)
	}
	if st, w := f.field(t, "k1", "status"), f.field(t, "k1", "worker"); st != "running" || w != "w1" {
		t.Fatalf("task %s by %s, want running by w1", st, w)
	}
	if n := f.rdb.ZCard(f.ctx, f.q.Handed()).Val(); n != 0 {
		t.Fatalf("hand-offs noted = %d, want the read one's note dropped", n)
	}
	f.wait(t, "w2", 1<<20)
	f.enqueue(t, lua.NewTask{ID: "k2"})
	hs = f.inbox(t, "w2")
	f.claim(t, lua.ClaimArgs{Consumer: "w2", Want: 0, Received: []lua.Received{{InboxEntry: hs[0].InboxEntry, ID: "k2"}}})
	if n := f.rdb.ZCard(f.ctx, f.q.Handed()).Val(); n != 0 {
		t.Fatalf("hand-offs noted = %d after the receipt, want 0", n)
	}
}

// A "d" row (an older entry delivered to the waiting worker) that the worker never read
// puts that entry's task back too, as it was: here a retry, whose attempt and failures
// stand, so its next start is attempt 2 (not a second attempt 1).
func TestRescueOfUnreadDeliveredRow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "old", Priority: 1, MaxRetries: 3})
	r := f.claim(t, lua.ClaimArgs{Consumer: "w0", Want: 1})
	if len(r.Started) != 1 {
		t.Fatalf("claim = %+v", r)
	}
	s := r.Started[0]
	if _, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 60_000, Items: []lua.Completion{{ID: "old", Entry: s.Entry, Band: 1,
		Attempt: 1, Outcome: lua.Retry, Text: "boom", RetryMS: f.now}}}); err != nil {
		t.Fatal(err)
	}
	sc, err := lua.SchedClaim.Run(f.ctx, f.rdb, lua.SchedClaimArgs{Queue: f.q, NowMS: f.now, Limit: 10, StaleMS: f.now - 60_000})
	due := sc.Due
	if err != nil || len(due) != 1 {
		t.Fatalf("scheduler claim = %v, %v", due, err)
	}
	if _, err := lua.SchedEnqueue.Run(f.ctx, f.rdb, lua.SchedEnqueueArgs{Queue: f.q, NowMS: f.now, IDs: due}); err != nil {
		t.Fatal(err)
	}
	retry := f.field(t, "old", "entry")
	f.register(t, "w1")
	f.enqueue(t, lua.NewTask{ID: "new", Priority: 1})
	if p := f.pending(t, 1); p != 1 {
		t.Fatalf("pending = %d, want the retry's entry delivered to w1", p)
	}
	ids, err := lua.Rescue.Run(f.ctx, f.rdb, lua.RescueArgs{Queue: f.q, NowMS: f.now, CutoffMS: f.now, Limit: 100})
	if err != nil || len(ids) != 1 || ids[0] != "old" {
		t.Fatalf("rescue = %v, %v; want old", ids, err)
	}
	for field, want := range map[string]string{"status": "queued", "attempt": "1", "failures": "1"} {
		if got := f.field(t, "old", field); got != want {
			t.Fatalf("%s = %q after the rescue, want %q", field, got, want)
		}
	}
	if e := f.field(t, "old", "entry"); e == retry || f.pending(t, 1) != 0 {
		t.Fatalf("entry %q (was %q), pending %d: want a new entry, nothing pending", e, retry, f.pending(t, 1))
	}
	r = f.claim(t, lua.ClaimArgs{Consumer: "w2", Want: 4})
	attempts := map[string]int64{}
	for _, s := range r.Started {
		attempts[s.ID] = s.Attempt
	}
	if len(r.Started) != 2 || attempts["old"] != 2 || attempts["new"] != 1 {
		t.Fatalf("claim = %+v, want old at attempt 2 and new at attempt 1", r.Started)
	}
}

// A delivered row naming a fresh task's entry, which carries no attempt field (enqueue.lua
// writes none at attempt 0), is rescued like any other: the task gets a new entry, still
// at attempt 0 and without the field, and the next claim starts it at attempt 1.
func TestRescueOfUnreadDeliveredFreshEntry(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "first", Priority: 1})
	first := f.field(t, "first", "entry")
	fields, err := f.rdb.XRange(f.ctx, f.q.Stream(1), first, first).Result()
	if err != nil || len(fields) != 1 || fmt.Sprint(fields[0].Values) != "map[task:first]" {
		t.Fatalf("entry %s = %+v, %v; want task first and no attempt", first, fields, err)
	}
	f.register(t, "w1")
	f.enqueue(t, lua.NewTask{ID: "second", Priority: 1})
	if p := f.pending(t, 1); p != 1 {
		t.Fatalf("pending = %d, want first's entry delivered to w1", p)
	}
	ids, err := lua.Rescue.Run(f.ctx, f.rdb, lua.RescueArgs{Queue: f.q, NowMS: f.now, CutoffMS: f.now, Limit: 100})
	if err != nil || len(ids) != 1 || ids[0] != "first" {
		t.Fatalf("rescue = %v, %v; want first", ids, err)
	}
	again := f.field(t, "first", "entry")
	fields, err = f.rdb.XRange(f.ctx, f.q.Stream(1), again, again).Result()
	if again == first || err != nil || len(fields) != 1 || fmt.Sprint(fields[0].Values) != "map[task:first]" {
		t.Fatalf("entry %s (was %s) = %+v, %v; want a new one, task first and no attempt", again, first, fields, err)
	}
	r := f.claim(t, lua.ClaimArgs{Consumer: "w2", Want: 4})
	attempts := map[string]int64{}
	for _, s := range r.Started {
		attempts[s.ID] = s.Attempt
	}
	if len(r.Started) != 2 || attempts["first"] != 1 || attempts["second"] != 1 || len(r.Invalid) != 0 {
		t.Fatalf("claim = %+v, invalid %+v; want first and second at attempt 1", r.Started, r.Invalid)
	}
}

// enqueueBatch runs one enqueue call of as and returns its results.
func (f *fixture) enqueueBatch(t *testing.T, as []lua.NewTask) []lua.EnqueueResult {
	t.Helper()
	for i := range as {
		if as[i].Function == "" {
			as[i].Function = "noop"
		}
	}
	rs, err := lua.Enqueue.Run(f.ctx, f.rdb, lua.EnqueueArgs{Queue: f.q, NowMS: f.now, Tasks: as})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// A batch is the same as its tasks enqueued one call each, in order: a unique key or an
// id taken earlier in the batch counts, each waiting worker gets one task, the rest queue.
func TestEnqueueBatchIsItsTasksInOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.register(t, "w1")
	f.register(t, "w2")
	rs := f.enqueueBatch(t, []lua.NewTask{
		{ID: "b1", Priority: 2, Payload: []byte("one")},
		{ID: "b2", Priority: 7, Unique: "k"},
		{ID: "b3", Priority: 7, Unique: "k"}, // the key is b2's now
		{ID: "b1"},                           // the id is taken
		{ID: "b4", RunAtMS: f.now + 60_000},  // delayed: no hand-off
		{ID: "b5", Priority: 2},              // both workers served: queued
	})
	want := []lua.EnqueueResult{{ID: "b1", Created: true}, {ID: "b2", Created: true}, {ID: "b2"}, {ID: "b1"},
		{ID: "b4", Created: true}, {ID: "b5", Created: true}}
	for i, r := range rs {
		if r.ID != want[i].ID || r.Created != want[i].Created || (i == 3) != errors.Is(r.Err, lua.ErrTaskExists) {
			t.Fatalf("result %d = %+v, want %+v (ErrTaskExists only for the taken id)", i, r, want[i])
		}
	}
	for id, st := range map[string]string{"b1": "running", "b2": "running", "b4": "scheduled", "b5": "queued"} {
		if got := f.field(t, id, "status"); got != st {
			t.Errorf("%s status = %q, want %q", id, got, st)
		}
	}
	if f.field(t, "b3", "status") != "" || f.field(t, "b1", "payload") != "one" || f.field(t, "b2", "unique") != "k" {
		t.Fatalf("b3 %q, b1 payload %q, b2 unique %q", f.field(t, "b3", "status"), f.field(t, "b1", "payload"), f.field(t, "b2", "unique"))
	}
	got := map[string]string{}
	for _, w := range []string{"w1", "w2"} {
		hs := f.inbox(t, w)
		if len(hs) != 1 || hs[0].Started == nil {
			t.Fatalf("%s inbox = %+v, want one started row", w, hs)
		}
		got[hs[0].Started.ID] = w
		if f.field(t, hs[0].Started.ID, "worker") != w {
			t.Fatalf("%s started for %s, inbox of %s", hs[0].Started.ID, f.field(t, hs[0].Started.ID, "worker"), w)
		}
	}
	if len(got) != 2 || got["b1"] == "" || got["b2"] == "" {
		t.Fatalf("hand-offs = %v, want b1 and b2", got)
	}
	if n := f.rdb.ZCard(f.ctx, f.q.Handed()).Val(); n != 2 {
		t.Fatalf("hand-off notes = %d, want 2", n)
	}
	if f.pending(t, 2) != 1 || f.pending(t, 7) != 1 || f.rdb.XLen(f.ctx, f.q.Stream(2)).Val() != 2 {
		t.Fatalf("band 2: %d pending of %d; band 7: %d pending", f.pending(t, 2), f.rdb.XLen(f.ctx, f.q.Stream(2)).Val(), f.pending(t, 7))
	}
}

func TestEnqueueBatchHandsNothingOffWhilePaused(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.register(t, "w1")
	if err := f.rdb.Set(f.ctx, f.q.Paused(), "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	f.enqueueBatch(t, []lua.NewTask{{ID: "p1"}, {ID: "p2"}})
	if f.field(t, "p1", "status") != "queued" || f.field(t, "p2", "status") != "queued" {
		t.Fatalf("statuses %q %q, want queued", f.field(t, "p1", "status"), f.field(t, "p2", "status"))
	}
	if n := f.rdb.ZCard(f.ctx, f.q.Waiting()).Val(); n != 1 {
		t.Fatalf("waiting = %d, want the registration kept for the resume", n)
	}
	if hs := f.inbox(t, "w1"); len(hs) != 0 {
		t.Fatalf("inbox = %+v, want empty", hs)
	}
}

func TestEnqueueRefusesABandOutOfRange(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, p := range []int{-1, keys.Bands} {
		if _, _, err := f.enqueueOne(lua.NewTask{ID: "x", Function: "noop", Priority: p}); err == nil {
			t.Fatalf("priority %d accepted", p)
		}
	}
	if n := f.rdb.Exists(f.ctx, f.q.Task("x")).Val(); n != 0 {
		t.Fatal("a refused task was created")
	}
}

// One registration removes at most lua.LapsedPerCall lapsed registrations: the
// waiting set of a fleet that died shrinks over a few calls, each call bounded.
func TestLapsedRegistrationsPrunedInBoundedSteps(t *testing.T) {
	t.Parallel()
	f := setup(t)
	gone := lua.LapsedPerCall + 3
	for i := range gone { // as registrations that lapsed while their workers were away
		f.rdb.ZAdd(f.ctx, f.q.Waiting(), redis.Z{Score: float64(f.now - 1), Member: lua.WaitingMember(1<<20, fmt.Sprintf("gone%d", i))})
	}
	f.wait(t, "live", 1<<20)
	if n := f.rdb.ZCard(f.ctx, f.q.Waiting()).Val(); n != int64(gone-lua.LapsedPerCall+1) {
		t.Fatalf("after one call: %d waiting, want %d (the live one and the lapsed left over)", n, gone-lua.LapsedPerCall+1)
	}
	f.wait(t, "live", 1<<20)
	if got := f.rdb.ZRange(f.ctx, f.q.Waiting(), 0, -1).Val(); len(got) != 1 {
		t.Fatalf("after two calls: waiting = %v, want the live worker alone", got)
	}
}

// A claim in reread mode (the worker's idle read failed without a reply) takes the
// inbox rows pending for the worker that it does not name as received: the row of a
// read whose reply was lost starts its task, once; a received row is not started again;
// a row whose task is no longer the worker's starts nothing. The inbox and its pending
// list are left empty.
func TestRereadTakesTheRowsOfALostRead(t *testing.T) {
	t.Parallel()
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprint("stale=", stale), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.wait(t, "w1", 1<<20)
			f.enqueue(t, lua.NewTask{ID: "a1"})
			got := f.inbox(t, "w1") // received: the worker runs a1
			f.wait(t, "w1", 1<<20)
			f.enqueue(t, lua.NewTask{ID: "a2"})
			if lost := f.inbox(t, "w1"); len(got) != 1 || len(lost) != 1 {
				t.Fatalf("inbox reads %+v then %+v, want a row each", got, lost)
			}
			if stale {
				// reclaimed by another worker meanwhile
				if err := f.rdb.HSet(f.ctx, f.q.Task("a2"), "attempt", "2", "worker", "w9").Err(); err != nil {
					t.Fatal(err)
				}
			}
			r := f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 1, Reread: true,
				Received: []lua.Received{{InboxEntry: got[0].InboxEntry, ID: "a1"}}})
			want := 1
			if stale {
				want = 0
			}
			if len(r.Started) != want || (want == 1 && (r.Started[0].ID != "a2" || r.Started[0].Attempt != 1 || !r.Started[0].HandedOff)) {
				t.Fatalf("reread claim started %+v, want %d (a2 at attempt 1)", r.Started, want)
			}
			if n := f.rdb.XLen(f.ctx, f.q.Inbox("w1")).Val(); n != 0 {
				t.Fatalf("inbox holds %d rows", n)
			}
			if p, err := f.rdb.XPending(f.ctx, f.q.Inbox("w1"), keys.Group).Result(); err != nil || p.Count != 0 {
				t.Fatalf("inbox PEL = %+v, %v; want empty", p, err)
			}
			if r := f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 1, Reread: true}); len(r.Started) != 0 {
				t.Fatalf("a second reread claim started %+v", r.Started)
			}
		})
	}
}
