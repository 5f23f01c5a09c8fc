package scaler

import (
	"testing"

	"github.com/dtq/dtq/internal/queuestat"
)

// A queue's own limit caps its share of the metric at what the limit keeps busy times
// the target; an unlimited queue counts its whole backlog.
func TestValueCappedByQueueLimit(t *testing.T) {
	m := Metadata{Queues: []string{"lim", "free"}, Priorities: queuestat.AllBands, TargetPerReplica: 10, IncludePending: true}
	lim := &queuestat.Stat{Queue: "lim", Bands: queuestat.AllBands, Limit: queuestat.Limit{Concurrency: 3}}
	lim.Band[5].Lag = 1000
	free := &queuestat.Stat{Queue: "free", Bands: queuestat.AllBands}
	free.Band[0].Lag = 7
	stats := map[string]*queuestat.Stat{"lim": lim, "free": free}
	if v := m.Value(m.Metrics()[0], stats, nil); v != 3*10+7 {
		t.Fatalf("value %d, want 37 (lim capped at 3 replicas' worth)", v)
	}
	lim.Limit = queuestat.Limit{RatePerSecond: 0.5}
	if v := m.Value(m.Metrics()[0], stats, nil); v != 1*10+7 {
		t.Fatalf("value %d, want 17 (a rate under 1/s keeps one replica)", v)
	}
	lim.Band[5].Lag = 4
	if v := m.Value(m.Metrics()[0], stats, nil); v != 4+7 {
		t.Fatalf("value %d, want 11 (under the cap)", v)
	}
}
