package queuestat_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/queuestat"
	"github.com/dtq/dtq/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

type fixture struct {
	c  *redis.Client
	ks keys.Space
}

func setup(t *testing.T, protocol int) fixture {
	t.Helper()
	srv := redistest.Shared(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: protocol})
	t.Cleanup(func() { _ = c.Close() })
	return fixture{c: c, ks: keys.New(redistest.Prefix(t))}
}

// add XADDs n task entries to stream and returns their ids.
func (f fixture) add(t *testing.T, stream string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		id, err := f.c.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: []any{"task", "t", "attempt", 0}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

func (f fixture) group(t *testing.T, stream string) {
	t.Helper()
	if err := f.c.XGroupCreateMkStream(context.Background(), stream, keys.Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
}

// deliver reads n entries through the group, leaving them pending.
func (f fixture) deliver(t *testing.T, stream string, n int) []string {
	t.Helper()
	res, err := f.c.XReadGroup(context.Background(), &redis.XReadGroupArgs{
		Group: keys.Group, Consumer: "w1", Streams: []string{stream, ">"}, Count: int64(n), Block: -1,
	}).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range res[0].Messages {
		ids = append(ids, m.ID)
	}
	if len(ids) != n {
		t.Fatalf("delivered %d entries, want %d", len(ids), n)
	}
	return ids
}

// finish acknowledges and deletes entries, as a worker does when a task is done.
func (f fixture) finish(t *testing.T, stream string, ids ...string) {
	t.Helper()
	ctx := context.Background()
	if err := f.c.XAck(ctx, stream, keys.Group, ids...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.c.XDel(ctx, stream, ids...).Err(); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, f fixture, specs []queuestat.Spec, now time.Time) []queuestat.Stat {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := queuestat.Read(ctx, f.c, f.ks, specs, now)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if len(st) != len(specs) {
		t.Fatalf("Read returned %d stats for %d specs", len(st), len(specs))
	}
	return st
}

func TestMissingQueueReadsZero(t *testing.T) {
	t.Parallel()
	for _, proto := range []int{2, 3} {
		f := setup(t, proto)
		st := read(t, f, []queuestat.Spec{{Queue: "nothing-here", Bands: queuestat.AllBands,
			Leads: []time.Duration{time.Minute}, Cursors: true, NextDue: true}}, time.Now())[0]
		for p := 0; p < keys.Bands; p++ {
			b := st.Band[p]
			if b.Lag != 0 || b.Pending != 0 || b.LastID != "0-0" {
				t.Errorf("RESP%d band %d = %+v, want zero with cursor 0-0", proto, p, b)
			}
		}
		if st.DueNow != 0 || st.DueWithin[0] != 0 || st.Dead != 0 || !st.NextDue[0].IsZero() {
			t.Errorf("RESP%d queue stat = %+v, want zero", proto, st)
		}
	}
}

func TestLagPendingAfterConsumption(t *testing.T) {
	t.Parallel()
	for _, proto := range []int{2, 3} {
		f := setup(t, proto)
		q := f.ks.Queue("mix")
		f.group(t, q.Stream(9))
		f.add(t, q.Stream(9), 6)
		got := f.deliver(t, q.Stream(9), 3)
		f.finish(t, q.Stream(9), got[0]) // one done: 2 pending, 3 undelivered
		f.group(t, q.Stream(3))
		f.add(t, q.Stream(3), 2)
		f.add(t, q.Stream(0), 4) // a stream nobody created the group on: all lag

		st := read(t, f, []queuestat.Spec{{Queue: "mix", Bands: queuestat.AllBands}}, time.Now())[0]
		want := map[int][2]int64{9: {3, 2}, 3: {2, 0}, 0: {4, 0}}
		for p := 0; p < keys.Bands; p++ {
			w := want[p]
			if st.Band[p].Lag != w[0] || st.Band[p].Pending != w[1] {
				t.Errorf("RESP%d band %d: lag %d pending %d, want %d %d", proto, p, st.Band[p].Lag, st.Band[p].Pending, w[0], w[1])
			}
		}
		if st.Band[9].LagFromLen {
			t.Errorf("RESP%d band 9: lag taken from XLEN, want Redis' lag (deleted entries were delivered)", proto)
		}
		if n := st.Backlog(queuestat.AllBands, true); n != 11 {
			t.Errorf("RESP%d backlog with pending = %d, want 11", proto, n)
		}
		if n := st.Backlog(queuestat.Band(9)|queuestat.Band(3), false); n != 5 {
			t.Errorf("RESP%d backlog of bands 9,3 without pending = %d, want 5", proto, n)
		}
	}
}

func TestNullLagFallsBackToLengthMinusPending(t *testing.T) {
	t.Parallel()
	for _, proto := range []int{2, 3} {
		f := setup(t, proto)
		q := f.ks.Queue("nulllag")
		s := q.Stream(5)
		f.group(t, s)
		ids := f.add(t, s, 5)
		f.deliver(t, s, 1)
		// Delete an undelivered entry (what cancel does): Redis can no longer count lag.
		if err := f.c.XDel(context.Background(), s, ids[3]).Err(); err != nil {
			t.Fatal(err)
		}
		info, err := f.c.XInfoGroups(context.Background(), s).Result()
		if err != nil {
			t.Fatal(err)
		}
		if info[0].Lag != -1 {
			t.Fatalf("precondition: Redis reports lag %d, want null (-1)", info[0].Lag)
		}
		st := read(t, f, []queuestat.Spec{{Queue: "nulllag", Bands: queuestat.Band(5)}}, time.Now())[0]
		b := st.Band[5]
		if b.Lag != 3 || b.Pending != 1 || !b.LagFromLen {
			t.Errorf("RESP%d band 5 = %+v, want lag 3 (XLEN 4 − pending 1) from length, pending 1", proto, b)
		}
	}
}

func TestScheduleDeadAndCursors(t *testing.T) {
	t.Parallel()
	f := setup(t, 3)
	ctx := context.Background()
	q := f.ks.Queue("sched")
	now := time.UnixMilli(1_800_000_000_000)
	ms := now.UnixMilli()
	f.c.ZAdd(ctx, q.Schedule(),
		redis.Z{Score: float64(ms - 5000), Member: "late"},
		redis.Z{Score: float64(ms), Member: "now"},
		redis.Z{Score: float64(ms + 500), Member: "soon"},
		redis.Z{Score: float64(ms + 60_000), Member: "later"})
	f.c.ZAdd(ctx, q.Claimed(), redis.Z{Score: float64(ms - 100), Member: "claimed"})
	f.c.ZAdd(ctx, q.Dead(), redis.Z{Score: 1, Member: "d1"}, redis.Z{Score: 2, Member: "d2"})
	ids := f.add(t, q.Stream(7), 3)

	st := read(t, f, []queuestat.Spec{{Queue: "sched", Bands: queuestat.Band(7),
		Leads: []time.Duration{time.Second, time.Hour}, Cursors: true, NextDue: true}}, now)[0]
	if st.DueNow != 3 {
		t.Errorf("DueNow = %d, want 3 (two due, one claimed)", st.DueNow)
	}
	if st.DueWithin[0] != 4 || st.DueWithin[1] != 5 {
		t.Errorf("DueWithin = %v, want [4 5]", st.DueWithin)
	}
	if !st.NextDue[0].Equal(time.UnixMilli(ms+60_000)) || !st.NextDue[1].IsZero() {
		t.Errorf("NextDue = %v, want [%v, none]", st.NextDue, time.UnixMilli(ms+60_000))
	}
	if st.Dead != 2 {
		t.Errorf("Dead = %d, want 2", st.Dead)
	}
	if st.Band[7].LastID != ids[2] || st.Band[7].Lag != 3 {
		t.Errorf("band 7 = %+v, want cursor %s and lag 3", st.Band[7], ids[2])
	}
	if st.Band[6] != (queuestat.BandStat{}) {
		t.Errorf("band 6 was not asked for but reads %+v", st.Band[6])
	}
}

func TestManyQueuesOneRead(t *testing.T) {
	t.Parallel()
	f := setup(t, 3)
	var specs []queuestat.Spec
	for i := 0; i < 10; i++ {
		name := "q" + string(rune('a'+i))
		q := f.ks.Queue(name)
		f.group(t, q.Stream(i))
		f.add(t, q.Stream(i), i+1)
		specs = append(specs, queuestat.Spec{Queue: name, Bands: queuestat.AllBands})
	}
	st := read(t, f, specs, time.Now())
	for i, s := range st {
		if s.Queue != specs[i].Queue || s.Band[i].Lag != int64(i+1) || s.Backlog(queuestat.AllBands, true) != int64(i+1) {
			t.Errorf("queue %s: %+v, want lag %d on band %d only", specs[i].Queue, s.Band, i+1, i)
		}
	}
}

func TestWrongTypeIsAnError(t *testing.T) {
	t.Parallel()
	f := setup(t, 3)
	q := f.ks.Queue("broken")
	f.c.Set(context.Background(), q.Schedule(), "x", 0)
	f.add(t, f.ks.Queue("fine").Stream(1), 2)
	st := read(t, f, []queuestat.Spec{{Queue: "broken", Bands: queuestat.AllBands}, {Queue: "fine", Bands: queuestat.AllBands}}, time.Now())
	if err := st[0].Err; err == nil || !queuestat.IsServerError(err) {
		t.Errorf("queue with a string schedule key: Err = %v, want a server error", err)
	}
	if st[1].Err != nil || st[1].Band[1].Lag != 2 {
		t.Errorf("the other queue of the same read: %+v, want lag 2 on band 1 and no error", st[1])
	}
}

func TestUnreachableIsNotAServerError(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	srv.Kill()
	_, err := queuestat.Read(context.Background(), c, keys.New("x"), []queuestat.Spec{{Queue: "q", Bands: queuestat.AllBands}}, time.Now())
	if err == nil || queuestat.IsServerError(err) {
		t.Fatalf("Read from a dead server: err = %v, want a connection error", err)
	}
}

func TestInvalidQueueName(t *testing.T) {
	t.Parallel()
	f := setup(t, 3)
	if _, err := queuestat.Read(context.Background(), f.c, f.ks, []queuestat.Spec{{Queue: "a{b}"}}, time.Now()); err == nil {
		t.Fatal("Read accepted queue name a{b}")
	}
}

func TestAddSaturates(t *testing.T) {
	t.Parallel()
	if got := queuestat.Add(math.MaxInt64-1, 5); got != math.MaxInt64 {
		t.Errorf("Add near max = %d, want MaxInt64", got)
	}
	if got := queuestat.Add(2, 3); got != 5 {
		t.Errorf("Add(2,3) = %d", got)
	}
	s := queuestat.Stat{Bands: queuestat.AllBands}
	for p := range s.Band {
		s.Band[p] = queuestat.BandStat{Lag: math.MaxInt64 / 4, Pending: math.MaxInt64 / 4}
	}
	if got := s.Backlog(queuestat.AllBands, true); got != math.MaxInt64 {
		t.Errorf("Backlog of huge bands = %d, want MaxInt64 (saturated)", got)
	}
}

// BenchmarkRead10x10 is one pipelined read of 10 queues × 10 bands with a lead.
func BenchmarkRead10x10(b *testing.B) {
	srv := redistest.Shared(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = c.Close() })
	ks := keys.New(redistest.Prefix(b))
	ctx := context.Background()
	var specs []queuestat.Spec
	for i := 0; i < 10; i++ {
		q := ks.Queue("q" + string(rune('a'+i)))
		for p := 0; p < keys.Bands; p++ {
			c.XGroupCreateMkStream(ctx, q.Stream(p), keys.Group, "0")
			c.XAdd(ctx, &redis.XAddArgs{Stream: q.Stream(p), Values: []any{"task", "t", "attempt", 0}})
		}
		specs = append(specs, queuestat.Spec{Queue: q.Name, Bands: queuestat.AllBands, Leads: []time.Duration{time.Minute}})
	}
	for b.Loop() {
		st, err := queuestat.Read(ctx, c, ks, specs, time.Now())
		if err != nil || st[9].Band[9].Lag != 1 {
			b.Fatalf("Read = %v", err)
		}
	}
}
