// Package function holds the functions this worker image runs. Like a FaaS template:
// add yours in Register, rebuild the image, enqueue tasks naming them.
//
// Shipped for tests, the demo and bench:
//
//	noop   does nothing
//	sleep  {"ms": N}: waits N ms, or less when cancelled (drain deadline, timeout)
//	fail   {"times": N}: fails the first N attempts, then succeeds
//	echo   returns its payload as the result
//	burn   {"ms": N}: burns CPU for N ms (checks cancellation every ms)
//	stamp  returns the Unix time in nanoseconds at which it started (latency benchmarks)
package function

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dtq/dtq/runtime"
)

// Register adds every function of this image to r.
func Register(r *runtime.Registry) {
	r.Register("noop", Noop, runtime.FuncOptions{MaxRetries: -1})
	r.Register("sleep", Sleep, runtime.FuncOptions{MaxRetries: -1})
	r.Register("fail", Fail, runtime.FuncOptions{MaxRetries: -1})
	r.Register("echo", Echo, runtime.FuncOptions{MaxRetries: -1})
	r.Register("burn", Burn, runtime.FuncOptions{MaxRetries: -1})
	r.Register("stamp", Stamp, runtime.FuncOptions{MaxRetries: -1})
}

// Registry returns a registry holding every function of this image.
func Registry() *runtime.Registry {
	r := runtime.NewRegistry()
	Register(r)
	return r
}

// Noop does nothing.
func Noop(context.Context, *runtime.Task) ([]byte, error) { return nil, nil }

// Echo returns its payload.
func Echo(_ context.Context, t *runtime.Task) ([]byte, error) { return t.Payload, nil }

type msArgs struct {
	MS int64 `json:"ms"`
}

type timesArgs struct {
	Times int64 `json:"times"`
}

// decode parses a JSON payload; a bad payload cannot succeed on retry, so it skips retries.
func decode(t *runtime.Task, v any) error {
	if len(t.Payload) == 0 {
		return nil
	}
	if err := json.Unmarshal(t.Payload, v); err != nil {
		return runtime.SkipRetry(fmt.Errorf("%s: payload is not the expected JSON: %w", t.Function, err))
	}
	return nil
}

// Sleep waits payload.ms milliseconds or until ctx ends.
func Sleep(ctx context.Context, t *runtime.Task) ([]byte, error) {
	var a msArgs
	if err := decode(t, &a); err != nil {
		return nil, err
	}
	if a.MS < 0 {
		return nil, runtime.SkipRetry(errors.New("sleep: ms must not be negative"))
	}
	tm := time.NewTimer(time.Duration(a.MS) * time.Millisecond)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ErrPlannedFailure is what fail returns while it still has failures to go.
var ErrPlannedFailure = errors.New("planned failure")

// Fail fails the first payload.times attempts, then succeeds.
func Fail(_ context.Context, t *runtime.Task) ([]byte, error) {
	var a timesArgs
	if err := decode(t, &a); err != nil {
		return nil, err
	}
	if t.Attempt <= a.Times {
		return nil, fmt.Errorf("%w %d of %d", ErrPlannedFailure, t.Attempt, a.Times)
	}
	return []byte(fmt.Sprintf(`{"attempt":%d}`, t.Attempt)), nil
}

// Burn keeps a CPU busy for payload.ms milliseconds.
func Burn(ctx context.Context, t *runtime.Task) ([]byte, error) {
	var a msArgs
	if err := decode(t, &a); err != nil {
		return nil, err
	}
	end := time.Now().Add(time.Duration(a.MS) * time.Millisecond)
	x := uint64(1)
	for time.Now().Before(end) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		for i := 0; i < 20000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	return []byte(fmt.Sprint(x % 1000)), nil
}

// Stamp returns the Unix time in nanoseconds at which it started.
func Stamp(context.Context, *runtime.Task) ([]byte, error) {
	return strconv.AppendInt(nil, time.Now().UnixNano(), 10), nil
}
