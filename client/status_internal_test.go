package client

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/dtq/dtq/internal/liveness"
)

// The statuses claim.lua accepts as a task's are exactly the client's: a status the
// scripts write that Status lacks (or the reverse) fails here.
func TestStatusesAreTheScripts(t *testing.T) {
	src, err := os.ReadFile("../lua/claim.lua")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)local statuses = \{(.*?)\}`).FindSubmatch(src)
	if m == nil {
		t.Fatal("claim.lua: no statuses table")
	}
	var lua []string
	for _, f := range regexp.MustCompile(`(\w+) = true`).FindAllSubmatch(m[1], -1) {
		lua = append(lua, string(f[1]))
	}
	var ours []string
	for _, s := range Statuses {
		ours = append(ours, string(s))
	}
	slices.Sort(lua)
	slices.Sort(ours)
	if !slices.Equal(lua, ours) {
		t.Fatalf("claim.lua statuses %v, client.Statuses %v", lua, ours)
	}
}

func TestStatusFinished(t *testing.T) {
	var finished []Status
	for _, s := range Statuses {
		if s.Finished() {
			finished = append(finished, s)
		}
	}
	if want := []Status{StatusSucceeded, StatusDead, StatusCancelled}; !slices.Equal(finished, want) {
		t.Fatalf("finished statuses %v, want %v", finished, want)
	}
	if Status("").Finished() || Status("bogus").Finished() {
		t.Fatal("an unknown status reads as finished")
	}
}

// List states are the statuses of the same name.
func TestListStatesAreStatuses(t *testing.T) {
	for _, st := range ListStates {
		if !slices.Contains(Statuses, st) {
			t.Fatalf("list state %q is not a task status", st)
		}
	}
}

// client.Worker carries every field of the heartbeat record, and encodes as the record
// always did (dtq workers prints it).
func TestWorkerMirrorsLiveness(t *testing.T) {
	lt, ct := reflect.TypeFor[liveness.Worker](), reflect.TypeFor[Worker]()
	if lt.NumField() != ct.NumField() {
		t.Fatalf("liveness.Worker has %d fields, client.Worker %d", lt.NumField(), ct.NumField())
	}
	for i := range lt.NumField() {
		lf, cf := lt.Field(i), ct.Field(i)
		if lf.Name != cf.Name || lf.Tag != cf.Tag || lf.Type.Kind() != cf.Type.Kind() {
			t.Fatalf("field %d: liveness %s %s %q, client %s %s %q", i, lf.Name, lf.Type, lf.Tag, cf.Name, cf.Type, cf.Tag)
		}
	}
	now := time.UnixMilli(1_700_000_010_000)
	for _, st := range []liveness.Status{liveness.Starting, liveness.Ready, liveness.Busy, liveness.Draining, liveness.Stopped} {
		h := map[string]string{
			liveness.FieldWorkerID: "w1", liveness.FieldHostname: "h", liveness.FieldStatus: string(st),
			liveness.FieldStartedAt: "1700000000000", liveness.FieldLastHeartbeat: "1700000009000",
			liveness.FieldActiveTasks: "2", liveness.FieldConcurrency: "16", liveness.FieldProcessed: "7",
			liveness.FieldFailed: "3", liveness.FieldRetried: "1", liveness.FieldIntervalMS: "5000",
			liveness.FieldQueues: "a,b",
		}
		lw := liveness.Decode("w1", h, now)
		cw := workerOf(lw)
		if string(cw.Status) != string(st) || string(cw.Liveness) != string(lw.Liveness) {
			t.Fatalf("status %s: client worker %+v", st, cw)
		}
		a, _ := json.Marshal(lw)
		b, _ := json.Marshal(cw)
		if string(a) != string(b) {
			t.Fatalf("status %s: JSON differs:\nliveness %s\nclient   %s", st, a, b)
		}
	}
}

// The client's worker constants are the values the worker writes and the reader judges.
func TestWorkerConstants(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{string(WorkerStarting), "starting"}, {string(WorkerReady), "ready"}, {string(WorkerBusy), "busy"},
		{string(WorkerDraining), "draining"}, {string(WorkerStopped), "stopped"},
		{string(LivenessLive), "live"}, {string(LivenessStale), "stale"}, {string(LivenessStopped), "stopped"},
	} {
		if c.got != c.want {
			t.Fatalf("constant %q, want %q", c.got, c.want)
		}
	}
}
