package scaler

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseMetadata feeds the parser what a ScaledObject's author can write: lines of
// key=value. Whatever comes in, it must not panic, an error must name a key of the input
// (or the missing queues), and what it accepts must validate and give unique names.
func FuzzParseMetadata(f *testing.F) {
	f.Add("queues=default")
	f.Add("queues=a,b\npriorities=9-7\ntargetPerReplica=3\nbandTargets=9:1,8-7:2")
	f.Add("queuesFromEnv=q\nscheduledLead=1m30s\nincludePending=false\nactivationThreshold=0.5")
	f.Add("queues=q\npriorities=all\nscalerAddress=dtq:6000\nenableTLS=true")
	f.Fuzz(func(t *testing.T, in string) {
		md := map[string]string{}
		for _, line := range strings.Split(in, "\n") {
			k, v, _ := strings.Cut(line, "=")
			md[k] = v
		}
		m, err := ParseMetadata(md)
		if err != nil {
			var me *MetadataError
			if !errors.As(err, &me) {
				t.Fatalf("error %v is not a *MetadataError", err)
			}
			if _, ok := md[me.Key]; !ok && me.Key != KeyQueues {
				t.Fatalf("error names key %q, not in the input", me.Key)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("parsed metadata does not validate: %v", err)
		}
		seen := map[string]bool{}
		for _, mt := range m.Metrics() {
			if seen[mt.Name] || mt.Name == "" || len(mt.Name) > 64 {
				t.Fatalf("metric name %q repeated, empty or too long", mt.Name)
			}
			seen[mt.Name] = true
			if !(mt.Target > 0) || mt.Bands == 0 {
				t.Fatalf("metric %+v has no target or no bands", mt)
			}
		}
	})
}
