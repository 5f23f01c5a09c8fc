package function_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/dtqtest"
	"github.com/dtq/dtq/function"
)

// Each shipped function, run through the registry the worker image uses, as a worker
// runs it (dtqtest: the executor's timeout, retry and dead decisions).

func TestNoop(t *testing.T) {
	r := dtqtest.Run(t, function.Registry(), dtqtest.Task{Function: "noop", Payload: []byte("ignored")})
	if r.Outcome != dtqtest.Succeeded || r.Result != nil {
		t.Fatalf("%+v", r)
	}
}

func TestEcho(t *testing.T) {
	r := dtqtest.Run(t, function.Registry(), dtqtest.Task{Function: "echo", Payload: []byte(`{"to":"a@b.c"}`)})
	if r.Outcome != dtqtest.Succeeded || string(r.Result) != `{"to":"a@b.c"}` {
		t.Fatalf("%+v", r)
	}
}

func TestSleep(t *testing.T) {
	reg := function.Registry()
	if r := dtqtest.Run(t, reg, dtqtest.Task{Function: "sleep", Payload: []byte(`{"ms":1}`)}); r.Outcome != dtqtest.Succeeded {
		t.Fatalf("1 ms: %+v", r)
	}
	// Longer than its timeout: cut short at the timeout, retried, then dead.
	task := dtqtest.Task{Function: "sleep", Payload: []byte(`{"ms":600000}`), Timeout: 10 * time.Millisecond, MaxRetries: client.Retries(1)}
	rs := dtqtest.RunUntilDone(t, reg, task)
	if len(rs) != 2 || rs[0].Outcome != dtqtest.Retry || rs[1].Outcome != dtqtest.Dead ||
		!errors.Is(rs[1].Err, context.DeadlineExceeded) || rs[1].Error != "timed out after 10ms: context deadline exceeded" {
		t.Fatalf("past its timeout: %+v", rs)
	}
	for _, p := range []string{`{"ms":-1}`, `{"ms":"5"}`} {
		if r := dtqtest.Run(t, reg, dtqtest.Task{Function: "sleep", Payload: []byte(p)}); r.Outcome != dtqtest.Dead || r.Attempt != 1 {
			t.Fatalf("%s: dead at once (SkipRetry), got %+v", p, r)
		}
	}
}

// fail fails its first N attempts: with the default budget of 3 retries, N=2 succeeds
// at the third attempt and N=5 is dead after the fourth.
func TestFail(t *testing.T) {
	reg := function.Registry()
	rs := dtqtest.RunUntilDone(t, reg, dtqtest.Task{Function: "fail", Payload: []byte(`{"times":2}`)})
	if len(rs) != 3 || rs[2].Outcome != dtqtest.Succeeded || string(rs[2].Result) != `{"attempt":3}` ||
		!errors.Is(rs[0].Err, function.ErrPlannedFailure) || rs[1].Error != "planned failure 2 of 2" {
		t.Fatalf("times 2: %+v", rs)
	}
	rs = dtqtest.RunUntilDone(t, reg, dtqtest.Task{Function: "fail", Payload: []byte(`{"times":5}`)})
	if len(rs) != 4 || rs[3].Outcome != dtqtest.Dead || rs[3].Error != "planned failure 4 of 5" {
		t.Fatalf("times 5: %+v", rs)
	}
	if r := dtqtest.Run(t, reg, dtqtest.Task{Function: "fail", Payload: []byte(`[1]`)}); r.Outcome != dtqtest.Dead ||
		!strings.Contains(r.Error, "payload is not the expected JSON") {
		t.Fatalf("a bad payload: %+v", r)
	}
}

func TestBurn(t *testing.T) {
	reg := function.Registry()
	if r := dtqtest.Run(t, reg, dtqtest.Task{Function: "burn", Payload: []byte(`{"ms":1}`)}); r.Outcome != dtqtest.Succeeded || len(r.Result) == 0 {
		t.Fatalf("%+v", r)
	}
	r := dtqtest.Run(t, reg, dtqtest.Task{Function: "burn", Payload: []byte(`{"ms":600000}`), Timeout: 10 * time.Millisecond, MaxRetries: client.Retries(0)})
	if r.Outcome != dtqtest.Dead || !errors.Is(r.Err, context.DeadlineExceeded) {
		t.Fatalf("past its timeout: %+v", r)
	}
}

func TestStamp(t *testing.T) {
	before := time.Now().UnixNano()
	r := dtqtest.Run(t, function.Registry(), dtqtest.Task{Function: "stamp"})
	after := time.Now().UnixNano()
	ns, err := strconv.ParseInt(string(r.Result), 10, 64)
	if r.Outcome != dtqtest.Succeeded || err != nil || ns < before || ns > after {
		t.Fatalf("%+v: %d not in [%d, %d] (%v)", r, ns, before, after, err)
	}
}
