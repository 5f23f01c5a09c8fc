package runtime

import (
	"math"
	"testing"
	"time"
)

// The idle wait is bounded only while a queue waits for its limit: by the earliest
// throttle end or recheck, within limitRecheckMax, at least a millisecond.
func TestLimitWait(t *testing.T) {
	for _, c := range []struct {
		throttled, recheck []int64
		want               time.Duration
	}{
		{[]int64{0, 0}, []int64{0, 0}, time.Duration(math.MaxInt64)},
		{[]int64{1250, 0}, []int64{0, 0}, 250 * time.Millisecond},
		{[]int64{0, 0}, []int64{0, 1100}, 100 * time.Millisecond},
		{[]int64{1250, 0}, []int64{0, 1100}, 100 * time.Millisecond},
		{[]int64{9000, 0}, []int64{0, 0}, limitRecheckMax},
		{[]int64{900, 0}, []int64{0, 0}, time.Millisecond},
	} {
		if got := limitWait(1000, c.throttled, c.recheck); got != c.want {
			t.Errorf("limitWait(1000, %v, %v) = %v, want %v", c.throttled, c.recheck, got, c.want)
		}
	}
}
