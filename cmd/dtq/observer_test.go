package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// `dtq observer` replaces itself with dtq-observer found on PATH (or next to dtq), with
// the same arguments; without it, it says where it looked and how to build it.
func TestObserverExecsItsBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", dir+"/dtq-observer", "github.com/dtq/dtq/cmd/dtq-observer").CombinedOutput(); err != nil {
		t.Fatalf("build dtq-observer: %v\n%s", err, out)
	}
	out, errOut, code := dtq(t, []string{"PATH=" + dir + ":" + os.Getenv("PATH")}, "observer", "--help")
	if code != 0 || !strings.HasPrefix(out, "usage: dtq observer") || !strings.Contains(out, "DTQ_OBSERVER_TOKEN") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// The arguments reach it: an unknown one is its own exit 2.
	if _, errOut, code := dtq(t, []string{"PATH=" + dir + ":" + os.Getenv("PATH")}, "observer", "--bogus"); code != 2 || !strings.Contains(errOut, `unknown argument "--bogus"`) {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = dtq(t, []string{"PATH=" + t.TempDir()}, "observer")
	if code != exitFail || !strings.Contains(errOut, "dtq-observer is neither next to dtq nor on PATH") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// The worker binary carries none of the observer, and nothing whose package
// initialisers cost its start and that it does not need: the demo's embedded Redis and
// its Lua (dtq-miniredis), client_golang with its default collectors and procfs
// (internal/prom), encoding/gob (go-envconfig's), protobuf (its detrand hashes the
// executable at start).
func TestDtqDoesNotLinkTheObserver(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/dtq/dtq/cmd/dtq").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, not := range []string{"github.com/dtq/dtq/observer", "github.com/alicebob/miniredis/", "github.com/yuin/gopher-lua",
			"github.com/prometheus/", "encoding/gob", "github.com/sethvargo/go-envconfig", "google.golang.org/protobuf/", "google.golang.org/grpc",
			"runtime/metrics"} { // its initialiser costs a start ~1.8 ms in a slow spell
			if dep == strings.TrimSuffix(not, "/") || strings.HasPrefix(dep, not) {
				t.Errorf("cmd/dtq links %s", dep)
			}
		}
	}
}
