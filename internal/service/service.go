// Package service is the one lifecycle every long-running loop of dtq shares: the
// worker's poller, reaper, scheduler, heartbeat, completer and events publisher, and
// the scaler's watcher.
//
// A service embeds Base and starts its goroutine through Base.Go:
//
//	type reaper struct {
//		service.Base
//		…
//	}
//
//	func (r *reaper) Start(ctx context.Context) error {
//		r.Go(ctx, func(ctx context.Context) { service.Supervise(ctx, "reaper", r.log, nil, r.loop) })
//		return nil
//	}
//
// The rules, the same for every service:
//   - nothing starts in a constructor: a service that is never started leaves no goroutine;
//   - Start returns at once; the work runs on its own goroutine until ctx ends or Stop;
//   - Stop cancels that goroutine's context and waits for it to return; it is idempotent,
//     safe before Start and safe from several goroutines;
//   - Start after Stop starts the service anew.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"
)

// Service is what every dtq loop is.
type Service interface {
	// Start begins the service's work on a goroutine of its own and returns at once.
	Start(ctx context.Context) error
	// Stop ends the work and waits for it; idempotent and safe before Start.
	Stop()
}

// ErrStopped is the cause of a service context that Stop cancelled.
var ErrStopped = errors.New("service stopped")

// Base holds a service's goroutine: its cancel function and a channel closed when it
// returned. The zero value is ready to use.
type Base struct {
	mu     sync.Mutex
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// Go runs fn on a new goroutine under a context derived from ctx that Stop cancels,
// and returns at once. It reports false, and runs nothing, while an earlier fn still
// runs.
func (b *Base) Go(ctx context.Context, fn func(ctx context.Context)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done != nil {
		select {
		case <-b.done:
		default:
			return false // running
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	b.cancel, b.done = cancel, done
	go func() {
		defer close(done)
		defer cancel(nil)
		fn(ctx)
	}()
	return true
}

// Stop cancels the running fn (with ErrStopped as the cause) and waits for it to
// return. It does nothing before the first Go and after an earlier Stop.
func (b *Base) Stop() { b.StopCause(ErrStopped) }

// Cancel ends the running fn's context (with ErrStopped as the cause) and returns at
// once, without waiting for fn; a Stop after it waits. It does nothing before the
// first Go.
func (b *Base) Cancel() {
	b.mu.Lock()
	cancel := b.cancel
	b.mu.Unlock()
	if cancel != nil {
		cancel(ErrStopped)
	}
}

// StopCause is Stop with the cause the service's context reports.
func (b *Base) StopCause(cause error) {
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.mu.Unlock()
	if done == nil {
		return
	}
	cancel(cause)
	<-done
}

// Done is closed once the service's goroutine has returned; before the first Go it
// is an already-closed channel, as for a service that has nothing running.
func (b *Base) Done() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done == nil {
		return closed
	}
	return b.done
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// The restart delays of Supervise. A loop that fails after running restartReset or
// more (a healthy loop meeting one dropped connection) runs again after about
// restartMin: a reconnection is all most failures need, and an idle worker's loop is
// what picks up the tasks handed to it. Each failure that follows sooner doubles the
// delay, up to about restartMax, so a Redis that stays away is not hammered.
const (
	restartMin   = 20 * time.Millisecond
	restartMax   = time.Second
	restartReset = time.Second
)

// backoff is Supervise's restart delay, before its jitter.
type backoff struct{ next time.Duration }

// after returns the delay before the next run of a loop whose last run lasted ran.
func (b *backoff) after(ran time.Duration) time.Duration {
	if ran >= restartReset || b.next == 0 {
		b.next = restartMin
	}
	d := b.next
	b.next = min(2*d, restartMax)
	return d
}

// Supervise runs fn until ctx ends. An error or a panic of fn is logged, onRestart
// (when set) is called, and fn runs again: after 10–30 ms when it had run a second or
// more, else after twice the last delay, up to 0.5–1.5 s (each delay ±50 %). A loop
// never ends its process. It returns once ctx has ended.
func Supervise(ctx context.Context, name string, log *slog.Logger, onRestart func(), fn func(context.Context) error) {
	var b backoff
	for {
		began := time.Now()
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
				}
			}()
			return fn(ctx)
		}()
		if ctx.Err() != nil {
			return
		}
		if onRestart != nil {
			onRestart()
		}
		wait := Jitter(b.after(time.Since(began)), 0.5)
		log.Error(name+": loop failed; restarting", "err", err, "after", wait.Round(time.Millisecond).String())
		if !Sleep(ctx, wait) {
			return
		}
	}
}

// Sleep waits d or until ctx ends; it reports whether the full wait elapsed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Jitter returns d ± frac·d, uniformly.
func Jitter(d time.Duration, frac float64) time.Duration {
	f := 1 + frac*(2*rand.Float64()-1)
	return time.Duration(float64(d) * f)
}

// JitterUp returns d lengthened by a random fraction of it, up to frac.
func JitterUp(d time.Duration, frac float64) time.Duration {
	return time.Duration(float64(d) * (1 + frac*rand.Float64()))
}
