package observer

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/redistest"
)

// A subscriber that falls subscriberBatches behind is dropped, and told why; the
// others keep their place.
func TestHubDropsASlowSubscriber(t *testing.T) {
	t.Parallel()
	h := newHub(redistest.Shared(t).Client(t), redistest.Prefix(t)+":events", slog.New(slog.DiscardHandler))
	defer h.close()
	slow, err := h.subscribe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	quick, err := h.subscribe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range subscriberBatches + 1 {
		select {
		case <-slow.dropped:
			t.Fatalf("dropped after %d batches, with room for %d", i, subscriberBatches)
		default:
		}
		h.broadcast(batch{prev: "0-0", msgs: []redis.XMessage{{ID: "1-0"}}})
		<-quick.ch
	}
	select {
	case <-slow.dropped:
	default:
		t.Fatal("the slow subscriber was not dropped")
	}
	if !strings.Contains(slow.reason, "Last-Event-ID") {
		t.Fatalf("reason %q", slow.reason)
	}
	select {
	case <-quick.dropped:
		t.Fatal("the quick subscriber was dropped")
	default:
	}
	h.close()
	<-quick.dropped
	if _, err := h.subscribe(context.Background()); err == nil {
		t.Fatal("subscribed to a closed hub")
	}
}

func TestParseEntryID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"0": "0-0", "1-2": "1-2", "1700000000000-18446744073709551615": "1700000000000-18446744073709551615"} {
		if id, ok := parseEntryID(in); !ok || id.String() != want {
			t.Errorf("parseEntryID(%q) = %v %v, want %s", in, id, ok, want)
		}
	}
	for _, in := range []string{"", "-", "a", "1-", "-1", "1-2-3", "+1", "1-+2", " 1", "18446744073709551616"} {
		if id, ok := parseEntryID(in); ok {
			t.Errorf("parseEntryID(%q) = %v, want refused", in, id)
		}
	}
	if a, b := mustID("1-9"), mustID("2-0"); a.Compare(b) >= 0 || b.Compare(a) <= 0 || a.Compare(a) != 0 {
		t.Error("cmp")
	}
}

// An entry added as soon as subscribe returned comes in a batch: the reader's cursor
// was read before subscribe returned, not later on the reader's goroutine (where an
// entry added meanwhile was taken for an old one and never sent).
func TestHubCursorReadBeforeSubscribeReturns(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	for i := range 20 {
		key := redistest.Prefix(t) + ":events"
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"type", "OLD"}})
		h := newHub(rdb, key, slog.New(slog.DiscardHandler))
		sub, err := h.subscribe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"type", "NEW"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		select {
		case b := <-sub.ch:
			if len(b.msgs) != 1 || b.msgs[0].ID != id {
				t.Fatalf("round %d: batch %+v, want the one entry %s", i, b, id)
			}
		case <-time.After(30 * time.Second): // only turns a hang into a failure
			t.Fatalf("round %d: the entry added after subscribe never came", i)
		}
		h.close()
	}
}
