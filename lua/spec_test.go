package lua_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/lua"
)

// A claim starts a task from its packed spec, and a record written before enqueue.lua
// packed one (no "spec" field: one already in Redis at an upgrade) starts the same, from
// the fields that hold the facts one by one: fresh, within a function's limit, and
// replayed from its receipt.
func TestClaimReadsRecordsWithoutSpec(t *testing.T) {
	t.Parallel()
	for _, limited := range []bool{false, true} {
		t.Run(fmt.Sprintf("limits=%v", limited), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			if limited {
				f.setLimit(t, "send mail", "conc=5")
			}
			for _, id := range []string{"new", "old"} {
				f.enqueue(t, lua.NewTask{ID: id, Function: "send mail", Payload: []byte("p-" + id),
					Priority: 3, MaxRetries: 7, TimeoutMS: 1234, Unique: "u-" + id})
			}
			if f.field(t, "new", "spec") != fmt.Sprintf("1234 7 %d 1 send mail", f.now) {
				t.Fatalf("spec %q", f.field(t, "new", "spec"))
			}
			// as an older enqueue wrote it: the start facts in fields of their own
			if err := f.rdb.HDel(f.ctx, f.q.Task("old"), "spec").Err(); err != nil {
				t.Fatal(err)
			}
			if err := f.rdb.HSet(f.ctx, f.q.Task("old"), "timeout_ms", 1234, "max_retries", 7, "created_at", f.now).Err(); err != nil {
				t.Fatal(err)
			}
			first := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 2, Call: "w.1"})
			if len(first.Started) != 2 {
				t.Fatalf("claim = %+v", first)
			}
			slots := ""
			if limited {
				slots = "f:send mail"
			}
			for _, s := range first.Started {
				want := lua.Started{Entry: s.Entry, Band: 3, ID: s.ID, Attempt: 1, Function: "send mail",
					Payload: "p-" + s.ID, TimeoutMS: 1234, MaxRetries: 7, CreatedMS: f.now, HasUnique: true, Slots: slots, Epoch: "0"}
				if s != want {
					t.Fatalf("started %+v, want %+v", s, want)
				}
			}
			again := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 2, Call: "w.1"})
			if fmt.Sprint(again.Started) != fmt.Sprint(first.Started) {
				t.Fatalf("replay = %+v, want %+v", again.Started, first.Started)
			}
		})
	}
}

// A completion expires the unique key its task's record holds when it finishes, not one
// the task held at its claim: a key passed on meanwhile (the record's field cleared, as
// enqueue.lua does for a reused key) is the new holder's and keeps no retention.
func TestCompleteExpiresTheRecordsUniqueKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "a", Unique: "ka"})
	f.enqueue(t, lua.NewTask{ID: "b", Unique: "kb"})
	s := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 2}).Started
	if len(s) != 2 {
		t.Fatalf("claim = %+v", s)
	}
	if err := f.rdb.HSet(f.ctx, f.q.Task("b"), "unique", "").Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.Set(f.ctx, f.q.Unique("kb"), "c", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var items []lua.Completion
	for _, x := range s {
		items = append(items, lua.Completion{ID: x.ID, Entry: x.Entry, Band: x.Band, Attempt: x.Attempt, Unique: x.HasUnique, Outcome: lua.Succeeded})
	}
	codes, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 60000, Items: items})
	if err != nil || codes[0] != lua.CompleteApplied || codes[1] != lua.CompleteApplied {
		t.Fatalf("complete: %v %v", codes, err)
	}
	if ttl := f.rdb.PTTL(f.ctx, f.q.Unique("ka")).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("a's unique key ttl %v, want the retention", ttl)
	}
	if ttl := f.rdb.PTTL(f.ctx, f.q.Unique("kb")).Val(); ttl != -1 {
		t.Fatalf("the key b passed on has ttl %v, want none", ttl)
	}
}

// A receipt written by the previous release (flat: entry, band, id, attempt, how, slots
// of each start) still replays, as does one of a call that started a hand-off whose task
// id holds a brace (kept flat: the text receipt separates with braces).
func TestResentClaimReadsFlatReceipts(t *testing.T) {
	// "plain": the text alone (a call whose reply is starts only); else what the
	// MessagePack'd receipt keeps of its starts
	const receiptKind = `local r = redis.call("GET", KEYS[1])
		local c = string.byte(r, 1)
		if c >= 48 and c <= 57 then return "plain" end
		return type(cmsgpack.unpack(r)[1])`
	t.Parallel()
	t.Run("previous release", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.enqueue(t, lua.NewTask{ID: "o1", Payload: []byte("p1"), Priority: 2})
		first := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1, Call: "w.1"})
		if len(first.Started) != 1 {
			t.Fatalf("claim = %+v", first)
		}
		s := first.Started[0]
		if k, err := f.rdb.Eval(f.ctx, receiptKind, []string{f.q.Receipt("w.1")}).Result(); err != nil || k != "plain" {
			t.Fatalf("receipt's starts are a %v (%v), want plain text", k, err)
		}
		old := `redis.call("SET", KEYS[1], cmsgpack.pack({{ARGV[1], 2, "o1", 1, 0, false},
			{}, {}, 0, {}, {}, 0, 0}), "PX", 60000)`
		if err := f.rdb.Eval(f.ctx, old, []string{f.q.Receipt("w.1")}, s.Entry).Err(); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		again := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1, Call: "w.1"})
		if fmt.Sprint(again.Started) != fmt.Sprint(first.Started) {
			t.Fatalf("replay of a flat receipt = %+v, want %+v", again.Started, first.Started)
		}
	})
	t.Run("braced hand-off", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.register(t, "w")
		f.enqueue(t, lua.NewTask{ID: "a{b}", Payload: []byte("p")})
		f.enqueue(t, lua.NewTask{ID: "c"})
		first := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1, Call: "w.1"})
		if len(first.Started) != 2 || !first.Started[0].HandedOff || first.Started[0].ID != "a{b}" {
			t.Fatalf("claim = %+v, want c and the hand-off of a{b}", first.Started)
		}
		if k, err := f.rdb.Eval(f.ctx, receiptKind, []string{f.q.Receipt("w.1")}).Result(); err != nil || k != "table" {
			t.Fatalf("receipt's starts are a %v (%v), want a table", k, err)
		}
		again := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1, Call: "w.1"})
		if fmt.Sprint(again.Started) != fmt.Sprint(first.Started) {
			t.Fatalf("replay = %+v, want %+v", again.Started, first.Started)
		}
	})
}

// A claim's reply carries its starts flat, not a table each (claim.lua's top): three
// values a usual start (head, spec, payload), five for a task that failed before (its
// failures an integer, then its slots), and the receipt's text is the starts' heads as
// the reply carries them. A replay decodes to the same starts.
func TestClaimReplyIsFlat(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, id := range []string{"a", "c"} {
		f.enqueue(t, lua.NewTask{ID: id, Function: "f n", Payload: []byte("p-" + id), Priority: 4, TimeoutMS: 99})
	}
	// c is queued again after failing twice: its record at attempt 1 (failures are read
	// only past attempt 0), its entry replaced by one at attempt 1
	queuedWith := f.field(t, "c", "entry")
	requeued, err := f.rdb.XAdd(f.ctx, &redis.XAddArgs{Stream: f.q.Stream(4), Values: []any{"task", "c", "attempt", "1"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.XDel(f.ctx, f.q.Stream(4), queuedWith).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.HSet(f.ctx, f.q.Task("c"), "failures", 2, "attempt", 1, "entry", requeued).Err(); err != nil {
		t.Fatal(err)
	}
	a := lua.ClaimArgs{Queue: f.q, Consumer: "w", NowMS: f.now, Want: 2, MaxPayload: 1 << 20, Call: "w.1"}
	raw, err := lua.RawReply(f.ctx, f.rdb, lua.Claim, a)
	if err != nil {
		t.Fatal(err)
	}
	got := raw.([]any)[0].([]any)
	spec := fmt.Sprintf("99 %d %d 0 f n", 25, f.now)
	if s := f.field(t, "a", "spec"); s != spec {
		spec = s // the default max retries is enqueue.lua's to choose
	}
	entry := func(id string) string { return f.field(t, id, "entry") }
	want := []any{entry("a") + "{4{1{0{a", spec, "p-a", entry("c") + "{4{2{0{c", spec, "p-c", int64(2), ""}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("started = %q\nwant      %q", got, want)
	}
	// a reply of starts only: the receipt is their text alone, not MessagePack
	text := entry("a") + "{4{1{0{a}" + entry("c") + "{4{2{0{c"
	if receipt, err := f.rdb.Get(f.ctx, f.q.Receipt("w.1")).Result(); err != nil || receipt != text {
		t.Fatalf("receipt = %q (%v), want %q", receipt, err, text)
	}
	again := f.claim(t, a)
	if len(again.Started) != 2 || again.Started[1].Failures != 2 || again.Started[0].Failures != 0 ||
		again.Started[1].Function != "f n" || again.Started[1].TimeoutMS != 99 || again.Started[1].Payload != "p-c" {
		t.Fatalf("replay = %+v", again.Started)
	}
	// the same text in MessagePack, as the previous release kept it, replays the same
	old := `redis.call("SET", KEYS[1], cmsgpack.pack({ARGV[1], {}, {}, 0, {}, {}, 0, 0}), "PX", 60000)`
	if err := f.rdb.Eval(f.ctx, old, []string{f.q.Receipt("w.1")}, text).Err(); err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	if third := f.claim(t, a); fmt.Sprint(third.Started) != fmt.Sprint(again.Started) {
		t.Fatalf("replay of a MessagePack'd text receipt = %+v, want %+v", third.Started, again.Started)
	}
}

// A task id with an opening brace but no closing one starts and replays: the id comes
// last in its head, and only a closing brace would split the receipt's text. One with
// a closing brace is a bad task id (TestClaimHostileEntryFields).
func TestClaimStartsIDWithOpeningBrace(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "x{y", Payload: []byte("p")})
	first := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1, Call: "w.1"})
	if len(first.Started) != 1 || first.Started[0].ID != "x{y" || len(first.Invalid) != 0 {
		t.Fatalf("claim = %+v", first)
	}
	again := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1, Call: "w.1"})
	if fmt.Sprint(again.Started) != fmt.Sprint(first.Started) {
		t.Fatalf("replay = %+v, want %+v", again.Started, first.Started)
	}
}

// A finished record's retention is set with PEXPIREAT at Redis's time + keep; a user whose
// ACL (from an older docs/reliability.md) refuses TIME or PEXPIREAT still gets it, with
// PEXPIRE, on every record and unique key of the call, and every outcome is applied.
func TestCompleteRetentionUnderAnOlderACL(t *testing.T) {
	t.Parallel()
	for _, deny := range []string{"", "-pexpireat -time", "-pexpireat"} {
		t.Run(strings.ReplaceAll("deny"+deny, " ", ""), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			rdb := f.rdb
			if deny != "" {
				srv := redistest.Shared(t)
				user := "old-" + strings.ReplaceAll(f.q.Task(""), ":", "-")
				args := []any{"ACL", "SETUSER", user, "reset", "on", ">pw", "~*", "&*", "+@all"}
				for _, d := range strings.Fields(deny) {
					args = append(args, d)
				}
				if err := f.rdb.Do(f.ctx, args...).Err(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { f.rdb.Do(context.Background(), "ACL", "DELUSER", user) })
				rdb = redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: "pw"})
				t.Cleanup(func() { rdb.Close() })
				if err := rdb.Do(f.ctx, "TIME").Err(); (err != nil) != strings.Contains(deny, "-time") {
					t.Fatalf("TIME as %s: %v, want refused only when denied", user, err)
				}
			}
			for _, id := range []string{"a", "b", "c"} {
				f.enqueue(t, lua.NewTask{ID: id, Unique: "k" + id})
			}
			s := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 3}).Started
			if len(s) != 3 {
				t.Fatalf("claim = %+v", s)
			}
			items := successes(s)
			items[2].Outcome = lua.Cancelled
			codes, err := lua.Complete.Run(f.ctx, rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 60000, Items: items})
			if err != nil || len(codes) != 3 {
				t.Fatalf("complete: %v %v", codes, err)
			}
			for i, x := range s {
				if codes[i] != lua.CompleteApplied {
					t.Fatalf("complete of %s = %v, want applied", x.ID, codes[i])
				}
				for _, k := range []string{f.q.Task(x.ID), f.q.Unique("k" + x.ID)} {
					if ttl := f.rdb.PTTL(f.ctx, k).Val(); ttl <= 59*time.Second || ttl > time.Minute {
						t.Fatalf("%s: ttl %v, want the retention (1 min)", k, ttl)
					}
				}
			}
		})
	}
}

// A task due at once without a unique key is created without the fields that would hold
// their defaults (handback, unique, run_at); one with a unique key, a due time or a
// hand-off has them all. Either runs and completes the same.
func TestEnqueueLeavesOutDefaultFields(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.register(t, "idle")
	f.enqueue(t, lua.NewTask{ID: "handed"}) // the stream's only entry: handed to idle
	if st := f.field(t, "handed", "status"); st != "running" {
		t.Fatalf("handed: status %q, want running (a hand-off)", st)
	}
	f.enqueue(t, lua.NewTask{ID: "plain"})
	f.enqueue(t, lua.NewTask{ID: "uniq", Unique: "k"})
	f.enqueue(t, lua.NewTask{ID: "due", RunAtMS: f.now - 1})
	for id, want := range map[string]bool{"plain": false, "uniq": true, "due": true, "handed": true} {
		fields, err := f.rdb.HKeys(f.ctx, f.q.Task(id)).Result()
		if err != nil {
			t.Fatal(err)
		}
		has := map[string]bool{}
		for _, k := range fields {
			has[k] = true
		}
		for _, k := range []string{"handback", "unique", "run_at"} {
			if has[k] != want {
				t.Fatalf("%s: field %s present %v, want %v (fields %v)", id, k, has[k], want, fields)
			}
		}
		for _, k := range []string{"status", "attempt", "entry", "worker", "started_at", "spec", "payload", "failures", "function", "priority", "id", "queue", "queued_at"} {
			if !has[k] {
				t.Fatalf("%s: no field %s (fields %v)", id, k, fields)
			}
		}
	}
	s := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10}).Started
	if len(s) != 3 {
		t.Fatalf("claim = %+v, want plain, uniq and due", s)
	}
	items := successes(s)
	codes, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 60000, Items: items})
	if err != nil || fmt.Sprint(codes) != fmt.Sprint([]int{1, 1, 1}) {
		t.Fatalf("complete = %v, %v", codes, err)
	}
	for _, x := range s {
		if st := f.field(t, x.ID, "status"); st != "succeeded" {
			t.Fatalf("%s: status %q", x.ID, st)
		}
	}
}

// successes is a completion of each start, as a success without a result.
func successes(ss []lua.Started) []lua.Completion {
	items := make([]lua.Completion, len(ss))
	for i, x := range ss {
		items[i] = lua.Completion{ID: x.ID, Entry: x.Entry, Band: x.Band, Attempt: x.Attempt, Unique: x.HasUnique, Outcome: lua.Succeeded}
	}
	return items
}
