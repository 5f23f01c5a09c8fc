package liveness_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/dtq/dtq/internal/liveness"
)

// Decode judges heartbeat hashes written by anyone. Liveness comes from the heartbeat's
// age alone: live means a heartbeat no older than 3× its interval (5 s when the interval
// is missing or not positive), stale means none or an older one, stopped a clean exit.
func FuzzDecode(f *testing.F) {
	f.Add("ready", "1700000000000", "5000", "1700000001000", "3")
	f.Add("stopped", "1700000000000", "100", "1700000000050", "x")
	f.Add("busy", "", "0", "1700000000000", "")
	f.Add("ready", "abc", "-5", "1700000000000", "-1")
	f.Add("ready", "1700000000000", "10000000000000", "1700000100000", "1")
	f.Add("ready", "9223372036854775807", "5000", "1700000000000", "1")
	f.Fuzz(func(t *testing.T, status, last, interval, nowMS, active string) {
		now, err := strconv.ParseInt(nowMS, 10, 64)
		if err != nil || now <= 0 || now > 1<<50 {
			return
		}
		h := map[string]string{"status": status, "last_heartbeat": last, "heartbeat_interval_ms": interval, "active_tasks": active}
		w := liveness.Decode("w1", h, time.UnixMilli(now))
		if w.ID != "w1" || string(w.Status) != status {
			t.Fatalf("decoded %+v", w)
		}
		lastMS, lerr := strconv.ParseInt(last, 10, 64)
		iv, ierr := strconv.ParseInt(interval, 10, 64)
		if ierr != nil || iv <= 0 {
			iv = liveness.DefaultIntervalMS
		}
		var want liveness.Liveness
		switch {
		case lerr != nil || lastMS <= 0:
			want = liveness.Stale
		case float64(now-lastMS) > 3*float64(min(iv, 366*24*3600*1000)):
			want = liveness.Stale
		case liveness.Status(status) == liveness.Stopped:
			want = liveness.Gone
		default:
			want = liveness.Live
		}
		if w.Liveness != want {
			t.Fatalf("heartbeat at %s ms, interval %s ms, judged at %d ms: %q, want %q", last, interval, now, w.Liveness, want)
		}
	})
}
