package client_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/lua"
)

// deadFixture is a client with its own Redis handle, for writing records directly.
func deadFixture(t *testing.T) (*client.Client, *redis.Client, keys.Queue) {
	t.Helper()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.Prefix(t)
	return client.New(rdb, client.Options{Prefix: prefix}), rdb, keys.New(prefix).Queue("q")
}

// writeDead writes dead records as complete.lua leaves them (no payload field); fn ""
// makes invalid-entry-like records, which have nothing to run.
func writeDead(t *testing.T, rdb *redis.Client, q keys.Queue, ids []string, diedMS int64, fn string) {
	t.Helper()
	ctx := context.Background()
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			p.HSet(ctx, q.Task(id), "status", "dead", "attempt", 1, "entry", "1-1", "function", fn, "priority", 0, "failures", 1)
			p.ZAdd(ctx, q.Dead(), redis.Z{Score: float64(diedMS + int64(i)), Member: id})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%05d", prefix, i)
	}
	return out
}

// RequeueAllDead goes through more than one batch and past the records it must keep
// (nothing to run), which it reports; a second call finds only those.
func TestRequeueAllDeadAcrossBatches(t *testing.T) {
	t.Parallel()
	c, rdb, q := deadFixture(t)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	n := lua.DeadBatch*2 + 11
	writeDead(t, rdb, q, names("a", n), now-100_000, "noop")
	// records with nothing to run, dying among the others: at the start, mid and end
	bad := []string{"invalid-1", "invalid-2", "invalid-3"}
	for i, at := range []int64{now - 100_001, now - 100_000 + int64(lua.DeadBatch), now - 1} {
		writeDead(t, rdb, q, bad[i:i+1], at, "")
	}
	r, err := c.RequeueAllDead(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if r.Requeued != int64(n) || !slices.Equal(r.WrongState, bad) || len(r.NotFound) != 0 {
		t.Fatalf("requeue all = requeued %d (want %d), wrong state %v, not found %v", r.Requeued, n, r.WrongState, r.NotFound)
	}
	if l := rdb.XLen(ctx, q.Stream(0)).Val(); l != int64(n) {
		t.Fatalf("stream holds %d, want %d", l, n)
	}
	r, err = c.RequeueAllDead(ctx, "q")
	if err != nil || r.Requeued != 0 || len(r.WrongState) != 3 {
		t.Fatalf("second requeue all = %+v, %v", r, err)
	}
}

func TestDeleteAllDeadAcrossBatches(t *testing.T) {
	t.Parallel()
	c, rdb, q := deadFixture(t)
	ctx := context.Background()
	n := lua.DeadBatch + 3
	writeDead(t, rdb, q, names("a", n), time.Now().UnixMilli()-10_000, "noop")
	r, err := c.DeleteAllDead(ctx, "q")
	if err != nil || r.Deleted != int64(n) {
		t.Fatalf("delete all = %+v, %v", r, err)
	}
	if k := rdb.Exists(ctx, q.Task("a00000"), q.Task(fmt.Sprintf("a%05d", n-1)), q.Dead()).Val(); k != 0 {
		t.Fatalf("%d keys remain", k)
	}
}

// Ids are each acted on once, in batches; bad input is refused before anything is done.
func TestDeadByIDs(t *testing.T) {
	t.Parallel()
	c, rdb, q := deadFixture(t)
	ctx := context.Background()
	ids := names("a", lua.DeadBatch+5)
	writeDead(t, rdb, q, ids, time.Now().UnixMilli()-10_000, "noop")
	r, err := c.RequeueDead(ctx, "q", append(append([]string{}, ids...), ids[0], "nosuch"))
	if err != nil || r.Requeued != int64(len(ids)) || !slices.Equal(r.NotFound, []string{"nosuch"}) || len(r.WrongState) != 0 {
		t.Fatalf("requeue ids = %+v, %v", r, err)
	}
	r, err = c.DeleteDead(ctx, "q", ids[:2])
	if err != nil || r.Deleted != 0 || !slices.Equal(r.NotFound, ids[:2]) {
		t.Fatalf("delete of requeued tasks = %+v, %v; want not found", r, err)
	}
	for _, tc := range []struct {
		queue string
		ids   []string
	}{{"q", nil}, {"q", []string{"ok", "a{b}"}}, {"a{b}", []string{"ok"}}, {"q", make([]string, client.MaxDeadIDs+1)}} {
		if _, err := c.RequeueDead(ctx, tc.queue, tc.ids); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("requeue %q %d ids: %v, want ErrInvalid", tc.queue, len(tc.ids), err)
		}
		if _, err := c.DeleteDead(ctx, tc.queue, tc.ids); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("delete %q %d ids: %v, want ErrInvalid", tc.queue, len(tc.ids), err)
		}
	}
	if _, err := c.RequeueAllDead(ctx, "a{b}"); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("requeue all of a bad queue: %v", err)
	}
	if err := c.RunNow(ctx, "q", "a{b}"); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("run now of a bad id: %v", err)
	}
	if err := c.RunNow(ctx, "q", "nosuch"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("run now of no task: %v", err)
	}
}

// Queue reports the retries among the scheduled, and the hour's throughput.
func TestQueueRetryingAndThroughput(t *testing.T) {
	t.Parallel()
	c, rdb, q := deadFixture(t)
	ctx := context.Background()
	now := time.Now()
	for range 2 {
		if _, _, err := c.Enqueue(ctx, client.Task{Queue: "q", Function: "noop"}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := lua.Claim.Run(ctx, rdb, lua.ClaimArgs{Queue: q, Consumer: "w", NowMS: now.UnixMilli(), Want: 2, MaxPayload: 1 << 20})
	if err != nil || len(s.Started) != 2 {
		t.Fatalf("claim: %+v %v", s, err)
	}
	var items []lua.Completion
	for i, st := range s.Started {
		items = append(items, lua.Completion{ID: st.ID, Entry: st.Entry, Band: st.Band, Attempt: st.Attempt,
			Outcome: []lua.Outcome{lua.Succeeded, lua.Retry}[i], RetryMS: now.UnixMilli() + 3600_000})
	}
	if _, err := lua.Complete.Run(ctx, rdb, lua.CompleteArgs{Queue: q, NowMS: now.UnixMilli(), Items: items}); err != nil {
		t.Fatal(err)
	}
	at := client.New(rdb, client.Options{Prefix: keysPrefix(q), Now: func() time.Time { return now }})
	qi, err := at.Queue(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	tp := qi.Throughput
	if qi.Retrying != 1 || qi.Scheduled != 1 || tp == nil || tp.Processed[59] != 2 || tp.Failed[59] != 1 || tp.StepS != 60 ||
		tp.StartMS != (now.UnixMilli()/60000-59)*60000 {
		t.Fatalf("queue = %+v, throughput %+v", qi, tp)
	}
	// an hour later every minute of the window is after it: zeros
	later := client.New(rdb, client.Options{Prefix: keysPrefix(q), Now: func() time.Time { return now.Add(time.Hour) }})
	qi, err = later.Queue(ctx, "q")
	if err != nil || slices.Max(qi.Throughput.Processed) != 0 {
		t.Fatalf("an hour later: %+v, %v", qi.Throughput, err)
	}
}

// keysPrefix recovers the key prefix of q (its stream keys are PREFIX:{Q}:pN).
func keysPrefix(q keys.Queue) string {
	s := q.Stream(0)
	return s[:len(s)-len(":{q}:p0")]
}

// state=succeeded pages newest first; successes pushed between pages do not disturb the
// pages after the cursor; a cursor whose entry was cut off ends the listing; an entry
// that is not "MS ID…" is listed malformed, a record gone missing.
func TestListSucceeded(t *testing.T) {
	t.Parallel()
	c, rdb, q := deadFixture(t)
	ctx := context.Background()
	push := func(vals ...any) {
		t.Helper()
		if err := rdb.LPush(ctx, q.Succeeded(), vals...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		id := fmt.Sprint("s", i)
		rdb.HSet(ctx, q.Task(id), "status", "succeeded", "function", "noop", "attempt", 1)
		push(fmt.Sprint(1000+i, " ", id))
	}
	rdb.Del(ctx, q.Task("s2"))
	o := client.ListOptions{State: client.StateSucceeded, Limit: 2}
	p, err := c.List(ctx, "q", o)
	if err != nil || len(p.Items) != 2 || p.Items[0].ID != "s4" || p.Items[0].AtMS != 1004 || p.Items[0].Status != client.StatusSucceeded || p.Next == "" {
		t.Fatalf("first page = %+v, %v", p, err)
	}
	push("1005 s5", "garbage")
	o.Cursor = p.Next
	p, err = c.List(ctx, "q", o)
	if err != nil || len(p.Items) != 2 || p.Items[0].ID != "s2" || !p.Items[0].Missing || p.Items[1].ID != "s1" {
		t.Fatalf("second page = %+v, %v", p, err)
	}
	cut := p.Next
	if err := rdb.LTrim(ctx, q.Succeeded(), 0, 3).Err(); err != nil { // s1 and s0 cut off
		t.Fatal(err)
	}
	o.Cursor = cut
	if p, err = c.List(ctx, "q", o); err != nil || len(p.Items) != 0 || p.Next != "" {
		t.Fatalf("after a cut cursor = %+v, %v", p, err)
	}
	o.Cursor, o.Limit = "", 10
	if p, err = c.List(ctx, "q", o); err != nil || len(p.Items) != 4 || !p.Items[0].Malformed || p.Items[1].ID != "s5" {
		t.Fatalf("from the start = %+v, %v", p, err)
	}
	o.Cursor = "bm9wZQ"
	if _, err := c.List(ctx, "q", o); !errors.Is(err, client.ErrBadCursor) {
		t.Fatalf("a garbage cursor: %v", err)
	}
}

// An entry of the succeeded list holds one completion call's successes, "MS ID1 ID2 …":
// listed last id first, a page may end part way through one and the next page goes on
// from there, across entries pushed meanwhile; a cursor part way through an entry cut
// off ends the listing, and one whose count is not a count is refused.
func TestListSucceededEntriesOfACall(t *testing.T) {
	t.Parallel()
	c, rdb, q := deadFixture(t)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		rdb.HSet(ctx, q.Task(id), "status", "succeeded", "function", "noop", "attempt", 1)
	}
	if err := rdb.LPush(ctx, q.Succeeded(), "2000 a b c", "3000 d e").Err(); err != nil {
		t.Fatal(err)
	}
	list := func(cursor string, limit int) *client.Page {
		t.Helper()
		p, err := c.List(ctx, "q", client.ListOptions{State: client.StateSucceeded, Limit: limit, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ids := func(p *client.Page) string {
		var s []string
		for _, it := range p.Items {
			s = append(s, fmt.Sprint(it.ID, "@", it.AtMS))
		}
		return strings.Join(s, " ")
	}
	p := list("", 10)
	if got := ids(p); got != "e@3000 d@3000 c@2000 b@2000 a@2000" || p.Next != "" {
		t.Fatalf("one page = %q (next %q)", got, p.Next)
	}
	var pages []string
	for cur, first := "", true; first || cur != ""; first = false {
		p := list(cur, 2)
		pages = append(pages, ids(p))
		cur = p.Next
		if first {
			// a call's successes pushed between pages do not disturb the next ones
			if err := rdb.LPush(ctx, q.Succeeded(), "4000 f").Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := strings.Join(pages, " | "); got != "e@3000 d@3000 | c@2000 b@2000 | a@2000" {
		t.Fatalf("pages of 2 = %q", got)
	}
	// part way through "2000 a b c" (c listed), then the entry is cut off
	p = list("", 4)
	if got := ids(p); got != "f@4000 e@3000 d@3000 c@2000" || p.Next == "" {
		t.Fatalf("page of 4 = %q (next %q)", got, p.Next)
	}
	if err := rdb.LTrim(ctx, q.Succeeded(), 0, 1).Err(); err != nil {
		t.Fatal(err)
	}
	if p := list(p.Next, 4); len(p.Items) != 0 || p.Next != "" {
		t.Fatalf("after the entry was cut off = %+v", p)
	}
	for _, pos := range []string{"2000 a b c\nx", "2000 a b c\n0", "\n1"} {
		cur := base64.RawURLEncoding.EncodeToString([]byte("succeeded|-1|" + pos))
		if _, err := c.List(ctx, "q", client.ListOptions{State: client.StateSucceeded, Cursor: cur}); !errors.Is(err, client.ErrBadCursor) {
			t.Fatalf("cursor %q: %v, want ErrBadCursor", pos, err)
		}
	}
}
