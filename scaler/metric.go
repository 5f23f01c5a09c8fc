package scaler

import (
	"fmt"
	"hash/fnv"
	"math"
	"strings"

	"github.com/dtq/dtq/internal/queuestat"
)

// Metric is one metric of a trigger: the backlog of some bands of the watched queues.
type Metric struct {
	Name      string
	Bands     queuestat.Bands
	Target    float64
	Scheduled bool // adds the due scheduled tasks (known per queue, not per band)
}

// Metrics lists the trigger's metrics: first the backlog of every watched band with
// TargetPerReplica (it also counts due scheduled tasks and decides activation), then one
// per band group. Names are stable: the same metadata always gives the same names, and
// the names of one trigger differ.
func (m Metadata) Metrics() []Metric {
	base := "dtq-" + queuePart(m.Queues)
	out := []Metric{{Name: base, Bands: m.Priorities, Target: m.TargetPerReplica, Scheduled: m.IncludeScheduled}}
	for _, g := range m.BandTargets {
		out = append(out, Metric{Name: base + "-p" + g.label(), Bands: g.Bands(), Target: g.Target})
	}
	return out
}

// queuePart renders queue names for a metric name: lowercase letters, digits and
// dashes, at most 40 bytes; a name that had to be changed to fit gets a hash of the
// exact list, so different lists do not read alike.
func queuePart(queues []string) string {
	joined := strings.Join(queues, "-")
	var b strings.Builder
	for _, r := range strings.ToLower(joined) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	s := b.String()
	if s == joined && len(s) <= 40 {
		return s
	}
	h := fnv.New32a()
	h.Write([]byte(strings.Join(queues, ",")))
	if len(s) > 31 {
		s = s[:31]
	}
	return fmt.Sprintf("%s-%08x", s, h.Sum32())
}

// Value is a metric's value over stats (the watched queues' signal) and the due
// scheduled tasks per queue.
//
// A queue with its own rate or concurrency limit counts for no more than its limit can
// keep busy (queuestat.Limit.Runnable: the concurrency C, or a rate of R a second as
// ceil(R) tasks) times the metric's target: KEDA's ceil(value / target) then asks for at
// most that many replicas for it, as each replica runs at least one task and more would
// sit idle behind the limit.
func (m Metadata) Value(mt Metric, stats map[string]*queuestat.Stat, due map[string]int64) int64 {
	var n int64
	for _, q := range m.Queues {
		st := stats[q]
		if st == nil {
			continue
		}
		v := st.Backlog(mt.Bands, m.IncludePending)
		if mt.Scheduled {
			v = queuestat.Add(v, due[q])
		}
		if run, ok := st.Limit.Runnable(); ok {
			v = min(v, limitCap(run, mt.Target))
		}
		n = queuestat.Add(n, v)
	}
	return n
}

// limitCap is run × target, saturating.
func limitCap(run int64, target float64) int64 {
	c := float64(run) * max(target, 1)
	if c >= math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return int64(math.Ceil(c))
}

// Active reports whether the backlog (the first metric's value) exceeds the activation
// threshold.
func (m Metadata) Active(backlog int64) bool {
	return float64(backlog) > m.ActivationThreshold
}
