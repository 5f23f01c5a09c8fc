package scaler

import (
	"slices"
	"testing"
	"time"

	"github.com/dtq/dtq/internal/queuestat"
)

// The tags of Metadata agree with the exported key names and defaults.
func TestMetadataTagsMatchKeysAndDefaults(t *testing.T) {
	t.Parallel()
	want := []string{KeyQueues, KeyPriorities, KeyTargetPerReplica, KeyActivationThreshold,
		KeyIncludePending, KeyIncludeScheduled, KeyScheduledLead, KeyBandTargets}
	if !slices.Equal(ownKeys, want) {
		t.Fatalf("keys from the tags = %v, want %v", ownKeys, want)
	}
	m, err := ParseMetadata(map[string]string{KeyQueues: "q"})
	if err != nil {
		t.Fatal(err)
	}
	prio, err := ParseBands(DefaultPriorities)
	if err != nil {
		t.Fatal(err)
	}
	if m.Priorities != prio || m.TargetPerReplica != DefaultTargetPerReplica ||
		m.ActivationThreshold != DefaultActivationThreshold || m.IncludePending != DefaultIncludePending ||
		m.IncludeScheduled != DefaultIncludeScheduled || m.ScheduledLead != DefaultScheduledLead {
		t.Errorf("defaults from the tags = %+v", m)
	}
}

// Every field is decoded by the parser of its type, from the key as given; a bad value
// leaves its field zero and names the key as given.
func TestDecodeMetadataByType(t *testing.T) {
	t.Parallel()
	var m Metadata
	given, err := decodeMetadata(map[string]string{"queuesFromEnv": " a , b ", KeyPriorities: "9-8",
		KeyTargetPerReplica: "2.5", KeyIncludePending: "false", KeyScheduledLead: "90", KeyBandTargets: "9:1"}, &m)
	if err != nil {
		t.Fatal(err)
	}
	if given[KeyQueues] != "queuesFromEnv" || given[KeyPriorities] != KeyPriorities {
		t.Errorf("given = %v", given)
	}
	want := Metadata{Queues: []string{"a", "b"}, Priorities: queuestat.Band(9) | queuestat.Band(8),
		TargetPerReplica: 2.5, ActivationThreshold: 0, IncludePending: false, IncludeScheduled: true,
		ScheduledLead: 90 * time.Second, BandTargets: []BandTarget{{Hi: 9, Lo: 9, Target: 1}}}
	if !slices.Equal(m.Queues, want.Queues) || m.Priorities != want.Priorities || m.TargetPerReplica != want.TargetPerReplica ||
		m.IncludePending || !m.IncludeScheduled || m.ScheduledLead != want.ScheduledLead || !slices.Equal(m.BandTargets, want.BandTargets) {
		t.Errorf("decoded %+v, want %+v", m, want)
	}

	m = Metadata{}
	_, err = decodeMetadata(map[string]string{KeyQueues: "q", "includeScheduledFromEnv": "maybe"}, &m)
	if err == nil || err.Error() != `metadata "includeScheduledFromEnv": "maybe" is not true or false` {
		t.Fatalf("bad bool: %v", err)
	}
	if m.IncludeScheduled || !m.IncludePending {
		t.Errorf("after a bad value: %+v; want that field zero, the others decoded", m)
	}
}
