package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/lua"
)

// listAll pages through a listing and fails on an item seen twice.
func listAll(t *testing.T, c *client.Client, queue string, o client.ListOptions) (items []client.ListItem, pages int) {
	t.Helper()
	seen := map[string]bool{}
	for {
		p, err := c.List(context.Background(), queue, o)
		if err != nil {
			t.Fatalf("list %+v: %v", o, err)
		}
		pages++
		if len(p.Items) > o.Limit {
			t.Fatalf("page of %d items, limit %d", len(p.Items), o.Limit)
		}
		for _, it := range p.Items {
			if seen[it.ID] {
				t.Fatalf("%s listed twice", it.ID)
			}
			seen[it.ID] = true
			items = append(items, it)
		}
		if p.Next == "" {
			return items, pages
		}
		o.Cursor = p.Next
		if pages > 1000 {
			t.Fatal("no end to the listing")
		}
	}
}

func enqueueN(t *testing.T, c *client.Client, n int, mk func(i int) client.Task) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		id, _, err := c.Enqueue(context.Background(), mk(i))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

func TestListQueuedPagesAcrossBands(t *testing.T) {
	t.Parallel()
	c, _ := setup(t)
	ids := enqueueN(t, c, 23, func(i int) client.Task {
		return client.Task{Queue: "q", Function: "noop", Priority: i % 10, ID: fmt.Sprintf("t%02d", i)}
	})
	items, pages := listAll(t, c, "q", client.ListOptions{State: client.StateQueued, Band: -1, Limit: 4})
	if len(items) != len(ids) || pages < 2 {
		t.Fatalf("%d items on %d pages, want %d on more than one", len(items), pages, len(ids))
	}
	for i := 1; i < len(items); i++ {
		if items[i].Priority > items[i-1].Priority {
			t.Fatalf("band %d after band %d: want the most urgent first", items[i].Priority, items[i-1].Priority)
		}
	}
	for _, it := range items {
		if it.Status != "queued" || it.Function != "noop" || it.EntryID == "" {
			t.Fatalf("item %+v", it)
		}
	}
	band3, _ := listAll(t, c, "q", client.ListOptions{State: client.StateQueued, Band: 3, Limit: 1})
	if len(band3) != 2 || band3[0].ID != "t03" || band3[1].ID != "t13" {
		t.Fatalf("band 3 = %+v, want t03, t13", band3)
	}
}

func TestListRunningIsThePendingEntries(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.Prefix(t)
	c := client.New(rdb, client.Options{Prefix: prefix})
	ctx := context.Background()
	enqueueN(t, c, 10, func(i int) client.Task { return client.Task{Queue: "q", Function: "noop", Priority: 5} })
	res, err := lua.Claim.Run(ctx, rdb, lua.ClaimArgs{Queue: keys.New(prefix).Queue("q"), Consumer: "w1", NowMS: time.Now().UnixMilli(), Want: 4, MaxPayload: 1 << 20})
	if err != nil || len(res.Started) != 4 {
		t.Fatalf("claim: %d started, %v", len(res.Started), err)
	}
	running, pages := listAll(t, c, "q", client.ListOptions{State: client.StateRunning, Band: -1, Limit: 3})
	if len(running) != 4 || pages != 2 {
		t.Fatalf("running: %d items on %d pages, want 4 on 2", len(running), pages)
	}
	started := map[string]bool{}
	for _, s := range res.Started {
		started[s.ID] = true
	}
	for _, it := range running {
		if !started[it.ID] || it.Consumer != "w1" || it.Deliveries != 1 || it.Status != "running" || it.Priority != 5 {
			t.Fatalf("running item %+v", it)
		}
	}
	queued, _ := listAll(t, c, "q", client.ListOptions{State: client.StateQueued, Band: -1, Limit: 100})
	if len(queued) != 6 {
		t.Fatalf("queued: %d, want 6", len(queued))
	}
	for _, it := range queued {
		if started[it.ID] {
			t.Fatalf("%s is running and listed as queued", it.ID)
		}
	}
}

func TestListScheduledRetryingDead(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.Prefix(t)
	q := keys.New(prefix).Queue("q")
	c := client.New(rdb, client.Options{Prefix: prefix})
	ctx := context.Background()
	at := time.Now().Add(time.Hour)
	// Equal due times: the zset orders them by member, and pages must too.
	delayed := enqueueN(t, c, 7, func(i int) client.Task {
		return client.Task{Queue: "q", Function: "noop", RunAt: at, ID: fmt.Sprintf("d%d", i)}
	})
	enqueueN(t, c, 5, func(i int) client.Task { return client.Task{Queue: "q", Function: "fail", ID: fmt.Sprintf("f%d", i)} })
	now := time.Now().UnixMilli()
	res, err := lua.Claim.Run(ctx, rdb, lua.ClaimArgs{Queue: q, Consumer: "w1", NowMS: now, Want: 5, MaxPayload: 1 << 20})
	if err != nil || len(res.Started) != 5 {
		t.Fatalf("claim: %v", err)
	}
	var done []lua.Completion
	for i, s := range res.Started {
		cm := lua.Completion{ID: s.ID, Entry: s.Entry, Band: s.Band, Attempt: s.Attempt, Outcome: lua.Retry, Text: "boom", RetryMS: at.UnixMilli()}
		if i >= 3 {
			cm.Outcome = lua.Dead
		}
		done = append(done, cm)
	}
	if _, err := lua.Complete.Run(ctx, rdb, lua.CompleteArgs{Queue: q, NowMS: now, KeepMS: 0, Items: done}); err != nil {
		t.Fatal(err)
	}
	sched, pages := listAll(t, c, "q", client.ListOptions{State: client.StateScheduled, Limit: 2})
	if len(sched) != len(delayed) || pages < 2 {
		t.Fatalf("scheduled: %d on %d pages, want %d", len(sched), pages, len(delayed))
	}
	for i, it := range sched {
		if it.ID != delayed[i] || it.Status != "scheduled" || it.AtMS != at.UnixMilli() {
			t.Fatalf("scheduled[%d] = %+v, want %s", i, it, delayed[i])
		}
	}
	retrying, _ := listAll(t, c, "q", client.ListOptions{State: client.StateRetrying, Limit: 1})
	dead, _ := listAll(t, c, "q", client.ListOptions{State: client.StateDead, Limit: 1})
	if len(retrying) != 3 || len(dead) != 2 {
		t.Fatalf("retrying %d, dead %d; want 3 and 2", len(retrying), len(dead))
	}
	for _, it := range retrying {
		if it.Status != "retrying" || it.Error != "boom" || it.Failures != 1 {
			t.Fatalf("retrying item %+v", it)
		}
	}
	for _, it := range dead {
		if it.Status != "dead" || it.AtMS != now {
			t.Fatalf("dead item %+v", it)
		}
	}
}

// A page's last task leaving the zset (cancelled) between two pages loses nothing and
// repeats nothing, among members of one score.
func TestListResumesAfterTheCursorTaskLeft(t *testing.T) {
	t.Parallel()
	c, ctx := setup(t)
	at := time.Now().Add(time.Hour)
	ids := enqueueN(t, c, 9, func(i int) client.Task {
		return client.Task{Queue: "q", Function: "noop", RunAt: at, ID: fmt.Sprintf("s%d", i)}
	})
	p1, err := c.List(ctx, "q", client.ListOptions{State: client.StateScheduled, Limit: 4})
	if err != nil || len(p1.Items) != 4 || p1.Next == "" {
		t.Fatalf("page 1: %+v, %v", p1, err)
	}
	if err := c.Cancel(ctx, "q", p1.Items[3].ID); err != nil {
		t.Fatal(err)
	}
	p2, err := c.List(ctx, "q", client.ListOptions{State: client.StateScheduled, Limit: 10, Cursor: p1.Next})
	if err != nil {
		t.Fatal(err)
	}
	if len(p2.Items) != 5 || p2.Items[0].ID != ids[4] || p2.Next != "" {
		t.Fatalf("page 2 = %+v, want %v", p2.Items, ids[4:])
	}
}

// Matches far apart: a page may come back short (bounded work per call), with a cursor,
// and the listing still finds every match once.
func TestListRetryingAmongManyScheduled(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.Prefix(t)
	q := keys.New(prefix).Queue("q")
	c := client.New(rdb, client.Options{Prefix: prefix})
	ctx := context.Background()
	enqueueN(t, c, 100, func(i int) client.Task {
		return client.Task{Queue: "q", Function: "noop", Delay: time.Hour}
	})
	enqueueN(t, c, 1, func(i int) client.Task { return client.Task{Queue: "q", Function: "fail"} })
	now := time.Now().UnixMilli()
	res, err := lua.Claim.Run(ctx, rdb, lua.ClaimArgs{Queue: q, Consumer: "w1", NowMS: now, Want: 1, MaxPayload: 1 << 20})
	if err != nil || len(res.Started) != 1 {
		t.Fatalf("claim: %v", err)
	}
	s := res.Started[0]
	if _, err := lua.Complete.Run(ctx, rdb, lua.CompleteArgs{Queue: q, NowMS: now, KeepMS: 0, Items: []lua.Completion{{ID: s.ID, Entry: s.Entry, Band: s.Band, Attempt: s.Attempt,
		Outcome: lua.Retry, Text: "x", RetryMS: now + 2*3600_000}}}); err != nil {
		t.Fatal(err)
	}
	items, pages := listAll(t, c, "q", client.ListOptions{State: client.StateRetrying, Limit: 1})
	if len(items) != 1 || items[0].ID != s.ID || pages < 2 {
		t.Fatalf("retrying: %+v on %d pages, want %s after short pages", items, pages, s.ID)
	}
	sched, _ := listAll(t, c, "q", client.ListOptions{State: client.StateScheduled, Limit: 30})
	if len(sched) != 100 {
		t.Fatalf("scheduled: %d, want 100", len(sched))
	}
}

func TestListRefusesBadInput(t *testing.T) {
	t.Parallel()
	c, ctx := setup(t)
	enqueueN(t, c, 3, func(i int) client.Task { return client.Task{Queue: "q", Function: "noop", Delay: time.Hour} })
	p, err := c.List(ctx, "q", client.ListOptions{State: client.StateScheduled, Limit: 1})
	if err != nil || p.Next == "" {
		t.Fatalf("%+v %v", p, err)
	}
	for _, tc := range []struct {
		name  string
		queue string
		o     client.ListOptions
		want  error
	}{
		{"bad queue", "a{b}", client.ListOptions{State: client.StateQueued}, client.ErrInvalid},
		{"bad state", "q", client.ListOptions{State: "cancelled"}, client.ErrInvalid},
		{"limit over", "q", client.ListOptions{State: client.StateQueued, Limit: client.MaxListLimit + 1}, client.ErrInvalid},
		{"negative limit", "q", client.ListOptions{State: client.StateQueued, Limit: -1}, client.ErrInvalid},
		{"band 10", "q", client.ListOptions{State: client.StateQueued, Band: 10}, client.ErrInvalid},
		{"garbage cursor", "q", client.ListOptions{State: client.StateScheduled, Cursor: "%%%"}, client.ErrBadCursor},
		{"another state's cursor", "q", client.ListOptions{State: client.StateDead, Cursor: p.Next}, client.ErrBadCursor},
		{"a zset cursor on a stream", "q", client.ListOptions{State: client.StateQueued, Band: -1, Cursor: p.Next}, client.ErrBadCursor},
	} {
		if _, err := c.List(ctx, tc.queue, tc.o); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	// A queue with no keys at all lists nothing, in every state.
	for _, st := range client.ListStates {
		p, err := c.List(ctx, "empty", client.ListOptions{State: st, Band: -1})
		if err != nil || len(p.Items) != 0 || p.Next != "" {
			t.Errorf("%s of an empty queue: %+v, %v", st, p, err)
		}
	}
}

// Cancelling a queued task deletes its entry out of order, after which Redis reports
// the group's lag as null: the listing reads the last delivered id all the same.
func TestListQueuedAfterACancel(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.Prefix(t)
	c := client.New(rdb, client.Options{Prefix: prefix})
	ctx := context.Background()
	ids := enqueueN(t, c, 4, func(i int) client.Task { return client.Task{Queue: "q", Function: "noop", Priority: 2} })
	res, err := lua.Claim.Run(ctx, rdb, lua.ClaimArgs{Queue: keys.New(prefix).Queue("q"), Consumer: "w1", NowMS: time.Now().UnixMilli(), Want: 1, MaxPayload: 1 << 20})
	if err != nil || len(res.Started) != 1 || res.Started[0].ID != ids[0] {
		t.Fatalf("claim: %v", err)
	}
	if err := c.Cancel(ctx, "q", ids[2]); err != nil {
		t.Fatal(err)
	}
	items, _ := listAll(t, c, "q", client.ListOptions{State: client.StateQueued, Band: 2, Limit: 1})
	if len(items) != 2 || items[0].ID != ids[1] || items[1].ID != ids[3] {
		t.Fatalf("queued = %+v, want %s and %s", items, ids[1], ids[3])
	}
}
