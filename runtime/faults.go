package runtime

import (
	"time"
)

// Backoff of a queue (or a band) whose keys Redis refuses.
const (
	faultBackoffMin = time.Second
	faultBackoffMax = 10 * time.Second
)

// faults keeps, for one loop, what Redis refuses to serve because of its keys — a queue
// whose script fails on a key of the wrong type or on what it read there, or one band
// stream of another type — so the loop skips it for a while (1 s, doubling to 10 s)
// and serves every other queue and band, instead of failing as a whole. Each fault is
// logged once per backoff, with the key that is wrong. A loop's faults outlive its
// restarts; only that loop's goroutine uses them.
type faults struct {
	w     *Worker
	loop  string
	until map[string]time.Time
	wait  map[string]time.Duration
}

func (w *Worker) newFaults(loop string) *faults {
	return &faults{w: w, loop: loop, until: map[string]time.Time{}, wait: map[string]time.Duration{}}
}

// skip reports whether what is named key is in its backoff.
func (f *faults) skip(key string) bool {
	u, ok := f.until[key]
	return ok && time.Now().Before(u)
}

// fail puts key in backoff (twice the last one, within bounds) and logs why.
func (f *faults) fail(key string, err error) {
	d := f.wait[key]
	if d == 0 {
		d = faultBackoffMin
	} else {
		d = min(2*d, faultBackoffMax)
	}
	f.wait[key], f.until[key] = d, time.Now().Add(d)
	f.w.metrics.redisErrors.WithLabelValues(f.loop).Inc()
	f.w.log.Error(f.loop+": skipped while Redis refuses its keys; the rest is served", "key", key, "retry_in", d.String(), "err", err)
}

// ok clears key's fault once it is served again.
func (f *faults) ok(key string) {
	if _, was := f.wait[key]; was {
		delete(f.wait, key)
		delete(f.until, key)
		f.w.log.Info(f.loop+": served again", "key", key)
	}
}

// any reports whether anything is or was lately in backoff.
func (f *faults) any() bool { return len(f.wait) > 0 }
