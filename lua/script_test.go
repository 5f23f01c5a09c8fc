package lua

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

var preludeFunc = regexp.MustCompile(`(?m)^local function (\w+)\(`)

// Each script gets exactly the prelude definitions it calls, before its body, and
// every definition of the prelude is called by some script.
func TestWithPreludeJoinsWhatTheScriptCalls(t *testing.T) {
	var defined []string
	for _, m := range preludeFunc.FindAllStringSubmatch(prelude, -1) {
		defined = append(defined, m[1])
	}
	if len(defined) == 0 {
		t.Fatal("the prelude defines nothing")
	}
	used := map[string]bool{}
	for name, body := range map[string]string{"claim.lua": claimSrc, "complete.lua": completeSrc,
		"enqueue.lua": enqueueSrc, "touch.lua": touchSrc, "leave.lua": leaveSrc, "rescue.lua": rescueSrc} {
		full := joinPrelude(body)
		if !strings.HasSuffix(full, body) {
			t.Errorf("%s: the body is not the end of the script", name)
		}
		head := strings.TrimSuffix(full, body)
		for _, fn := range defined {
			calls := strings.Contains(body, fn+"(")
			has := strings.Contains(head, "local function "+fn+"(")
			if calls != has {
				t.Errorf("%s: calls %s: %v, defines it: %v", name, fn, calls, has)
			}
			used[fn] = used[fn] || calls
		}
	}
	for _, fn := range defined {
		if !used[fn] {
			t.Errorf("prelude function %s is called by no script", fn)
		}
	}
}

// A call whose arguments are refused is neither sent nor queued: Run and the Pending
// both report the refusal.
func TestRefusedArgumentsAreNotSent(t *testing.T) {
	q := keys.New("t").Queue("q")
	bad := TrimDeadArgs{Queue: q, Limit: 0}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // nothing listens: a sent call fails otherwise
	defer c.Close()
	if _, err := TrimDead.Run(context.Background(), c, bad); err == nil || !strings.Contains(err.Error(), "limit 0") {
		t.Fatalf("Run = %v, want the refusal", err)
	}
	p := c.Pipeline()
	pend := TrimDead.Queue(context.Background(), p, bad)
	if p.Len() != 0 {
		t.Fatalf("the pipeline holds %d commands, want none", p.Len())
	}
	if _, err := pend.Result(); err == nil || !errors.Is(err, pend.Err()) {
		t.Fatalf("Result = %v, Err = %v: want the refusal from both", err, pend.Err())
	}
}

// A scheduler enqueue of no ids sends nothing and replies nothing.
func TestSchedEnqueueOfNothingIsNoCall(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	r, err := SchedEnqueue.Run(context.Background(), c, SchedEnqueueArgs{Queue: keys.New("t").Queue("q")})
	if err != nil || len(r.Enqueued)+len(r.Dropped) != 0 {
		t.Fatalf("= %+v, %v; want nothing", r, err)
	}
}
