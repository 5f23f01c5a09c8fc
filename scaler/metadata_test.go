package scaler

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dtq/dtq/internal/queuestat"
)

func TestParseMetadataDefaults(t *testing.T) {
	t.Parallel()
	m, err := ParseMetadata(map[string]string{"queues": "default", "scalerAddress": "dtq-scaler:6000"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Priorities != queuestat.AllBands || m.TargetPerReplica != DefaultTargetPerReplica ||
		m.ActivationThreshold != 0 || !m.IncludePending || !m.IncludeScheduled || m.ScheduledLead != 0 || len(m.BandTargets) != 0 {
		t.Errorf("defaults = %+v", m)
	}
}

func TestParseMetadataEveryKey(t *testing.T) {
	t.Parallel()
	m, err := ParseMetadata(map[string]string{
		"queues": "emails, reports", "priorities": "9-5,0", "targetPerReplica": "2.5",
		"activationThreshold": "3", "includePending": "false", "includeScheduled": "false",
		"scheduledLead": "90s", "bandTargets": "9-8:1,7:2",
		// What KEDA's external trigger reads itself and passes on.
		"scalerAddress": "x:6000", "enableTLS": "true", "unsafeSsl": "false", "caCert": "c",
		"tlsCertFile": "f", "tlsClientCert": "c", "tlsClientKey": "k",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Metadata{Queues: []string{"emails", "reports"},
		Priorities:       queuestat.Band(9) | queuestat.Band(8) | queuestat.Band(7) | queuestat.Band(6) | queuestat.Band(5) | queuestat.Band(0),
		TargetPerReplica: 2.5, ActivationThreshold: 3, ScheduledLead: 90 * time.Second,
		BandTargets: []BandTarget{{Hi: 9, Lo: 8, Target: 1}, {Hi: 7, Lo: 7, Target: 2}}}
	if strings.Join(m.Queues, ",") != "emails,reports" || m.Priorities != want.Priorities || m.TargetPerReplica != 2.5 ||
		m.ActivationThreshold != 3 || m.IncludePending || m.IncludeScheduled || m.ScheduledLead != want.ScheduledLead ||
		len(m.BandTargets) != 2 || m.BandTargets[0] != want.BandTargets[0] || m.BandTargets[1] != want.BandTargets[1] {
		t.Errorf("parsed %+v\nwant   %+v", m, want)
	}
}

func TestParseMetadataFromEnv(t *testing.T) {
	t.Parallel()
	// KEDA resolves KEYFromEnv against the scale target's environment and sends the
	// resolved value under the same key.
	m, err := ParseMetadata(map[string]string{"queuesFromEnv": "a,b", "targetPerReplicaFromEnv": "4"})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Queues) != 2 || m.TargetPerReplica != 4 {
		t.Errorf("parsed %+v", m)
	}
	_, err = ParseMetadata(map[string]string{"queues": "a", "queuesFromEnv": "b"})
	assertKey(t, err, "queuesFromEnv")
	_, err = ParseMetadata(map[string]string{"queuesFromEnv": "a", "targetPerReplicaFromEnv": "zero"})
	assertKey(t, err, "targetPerReplicaFromEnv")
}

func assertKey(t *testing.T, err error, key string) {
	t.Helper()
	var me *MetadataError
	if !errors.As(err, &me) {
		t.Fatalf("err = %v, want a *MetadataError naming %q", err, key)
	}
	if me.Key != key || !strings.Contains(err.Error(), `"`+key+`"`) {
		t.Fatalf("err = %v (key %q), want it to name %q", err, me.Key, key)
	}
}

func TestParseMetadataErrorsNameTheKey(t *testing.T) {
	t.Parallel()
	base := func(kv ...string) map[string]string {
		m := map[string]string{"queues": "q"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		md  map[string]string
		key string
	}{
		{map[string]string{}, "queues"},
		{map[string]string{"queues": " "}, "queues"},
		{base("queues", "a,,b"), "queues"},
		{base("queues", "a,a"), "queues"},
		{base("queues", "a{b}"), "queues"},
		{base("queues", strings.Repeat("q,", MaxQueues)+"end"), "queues"},
		{base("queue", "x"), "queue"},
		{base("Queues", "x"), "Queues"},
		{base("priorities", ""), "priorities"},
		{base("priorities", "10"), "priorities"},
		{base("priorities", "9-"), "priorities"},
		{base("priorities", "-1"), "priorities"},
		{base("priorities", "high"), "priorities"},
		{base("targetPerReplica", "0"), "targetPerReplica"},
		{base("targetPerReplica", "-1"), "targetPerReplica"},
		{base("targetPerReplica", "NaN"), "targetPerReplica"},
		{base("targetPerReplica", "Inf"), "targetPerReplica"},
		{base("targetPerReplica", "ten"), "targetPerReplica"},
		{base("activationThreshold", "-0.5"), "activationThreshold"},
		{base("includePending", "yes please"), "includePending"},
		{base("includeScheduled", "2"), "includeScheduled"},
		{base("scheduledLead", "soon"), "scheduledLead"},
		{base("scheduledLead", "-5s"), "scheduledLead"},
		{base("scheduledLead", "48h"), "scheduledLead"},
		{base("bandTargets", "9"), "bandTargets"},
		{base("bandTargets", "9:0"), "bandTargets"},
		{base("bandTargets", "9-8:1,8:2"), "bandTargets"},
		{base("bandTargets", "12:1"), "bandTargets"},
		{base("priorities", "5-0", "bandTargets", "9:1"), "bandTargets"},
	} {
		_, err := ParseMetadata(tc.md)
		assertKey(t, err, tc.key)
	}
}

func TestUnknownKeySuggests(t *testing.T) {
	t.Parallel()
	_, err := ParseMetadata(map[string]string{"queues": "q", "targetperreplica": "3"})
	assertKey(t, err, "targetperreplica")
	if !strings.Contains(err.Error(), `did you mean "targetPerReplica"`) {
		t.Errorf("err = %v, want a suggestion", err)
	}
}

func TestMetricNamesStableAndUnique(t *testing.T) {
	t.Parallel()
	md := map[string]string{"queues": "Emails,reports.v2", "bandTargets": "9-8:1,7:2,0:9"}
	a, err := ParseMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ParseMetadata(md)
	seen := map[string]bool{}
	for i, mt := range a.Metrics() {
		if mt.Name != b.Metrics()[i].Name {
			t.Errorf("metric %d named %q then %q", i, mt.Name, b.Metrics()[i].Name)
		}
		if seen[mt.Name] {
			t.Errorf("metric name %q twice", mt.Name)
		}
		seen[mt.Name] = true
		for _, r := range mt.Name {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				t.Errorf("metric name %q has %q", mt.Name, r)
			}
		}
	}
	if got := a.Metrics()[0].Name; !strings.HasPrefix(got, "dtq-emails-reports-v2-") {
		t.Errorf("first metric = %q", got)
	}
	plain, _ := ParseMetadata(map[string]string{"queues": "default", "bandTargets": "9-8:1"})
	if n := plain.Metrics(); n[0].Name != "dtq-default" || n[1].Name != "dtq-default-p9-8" {
		t.Errorf("names = %q, %q", n[0].Name, n[1].Name)
	}
	other, _ := ParseMetadata(map[string]string{"queues": "emails,reports-v2"})
	if other.Metrics()[0].Name == a.Metrics()[0].Name {
		t.Errorf("different queue lists share the name %q", a.Metrics()[0].Name)
	}
}

func TestValueAndActivation(t *testing.T) {
	t.Parallel()
	m, err := ParseMetadata(map[string]string{"queues": "a,b", "priorities": "9-5", "bandTargets": "9:1",
		"activationThreshold": "4"})
	if err != nil {
		t.Fatal(err)
	}
	a := &queuestat.Stat{Queue: "a", Bands: queuestat.AllBands}
	a.Band[9] = queuestat.BandStat{Lag: 1, Pending: 1}
	a.Band[4] = queuestat.BandStat{Lag: 100} // not watched
	b := &queuestat.Stat{Queue: "b", Bands: queuestat.AllBands}
	b.Band[5] = queuestat.BandStat{Lag: 1}
	stats := map[string]*queuestat.Stat{"a": a, "b": b}
	due := map[string]int64{"a": 1, "b": 0}
	mts := m.Metrics()
	if got := m.Value(mts[0], stats, due); got != 4 {
		t.Errorf("backlog = %d, want 4 (2 on band 9, 1 on band 5, 1 due)", got)
	}
	if got := m.Value(mts[1], stats, due); got != 2 {
		t.Errorf("band 9 metric = %d, want 2", got)
	}
	if m.Active(4) || !m.Active(5) {
		t.Error("activation must need a backlog above the threshold")
	}
}
