package heapfloor

import (
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"
)

// resident is the process's resident set in bytes (/proc/self/statm).
func resident(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * int64(os.Getpagesize())
}

func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// The floor raises the collector's target by its size and leaves the resident set
// alone; 0 keeps none, and the first floor stays.
func TestKeepRaisesTheGoalNotTheResidentSet(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" || os.Getenv("GOGC") != "" {
		t.Fatal("run without GOMEMLIMIT and GOGC: the test reads the collector's target")
	}
	if Kept() != 0 {
		t.Fatalf("a floor before Keep: %d MiB", Kept())
	}
	if got := Keep(0); got != 0 || Kept() != 0 {
		t.Fatalf("Keep(0) kept a floor: %d, Kept() = %d", got, Kept())
	}
	runtime.GC()
	goal0 := heapGoal()
	rss0 := resident(t)
	if got := Keep(256); got != 256 {
		t.Fatalf("Keep(256) = %d, want 256", got)
	}
	runtime.GC()
	goal := heapGoal()
	rss := resident(t)
	if goal < goal0+256<<20 {
		t.Fatalf("heap goal %d MiB after a 256 MiB floor (before: %d MiB)", goal>>20, goal0>>20)
	}
	if rss-rss0 > 16<<20 {
		t.Fatalf("resident set grew by %d MiB with the floor (it is never touched)", (rss-rss0)>>20)
	}
	if got := Keep(8); got != 256 || Kept() != 256 {
		t.Fatalf("a second Keep changed the floor: Keep(8) = %d, Kept() = %d", got, Kept())
	}
	t.Logf("goal %d → %d MiB, resident %d → %d MiB", goal0>>20, goal>>20, rss0>>20, rss>>20)
}

// Under GOMEMLIMIT the floor is at most an eighth of the limit (checked in child
// processes: the floor is once per process).
func TestFloorUnderAMemoryLimit(t *testing.T) {
	if os.Getenv("HEAPFLOOR_CHILD") == "1" {
		os.Stdout.WriteString("kept=" + strconv.Itoa(Keep(64)) + "\n")
		return
	}
	for _, c := range []struct {
		limit string
		want  int
	}{{"", 64}, {"1GiB", 64}, {"256MiB", 32}, {"7MiB", 0}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFloorUnderAMemoryLimit$")
		cmd.Env = append(os.Environ(), "HEAPFLOOR_CHILD=1")
		if c.limit != "" {
			cmd.Env = append(cmd.Env, "GOMEMLIMIT="+c.limit)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		if want := "kept=" + strconv.Itoa(c.want) + "\n"; !strings.Contains(string(out), want) {
			t.Errorf("GOMEMLIMIT=%q, Keep(64): want %q in the child's output:\n%s", c.limit, want, out)
		}
	}
}

// KeepAtFirstCollection places nothing until the collector runs, then the floor; with
// 0 it arranges nothing. Checked in child processes (the floor is once per process)
// with the collector off but for runtime.GC.
func TestKeepAtFirstCollection(t *testing.T) {
	if mib := os.Getenv("HEAPFLOOR_FIRST_CHILD"); mib != "" {
		n, _ := strconv.Atoi(mib)
		done := KeepAtFirstCollection(n)
		waste := make([][]byte, 0, 16)
		for range 16 {
			waste = append(waste, make([]byte, 1<<20)) // 16 MiB, no collection: GOGC=off
		}
		runtime.KeepAlive(waste)
		os.Stdout.WriteString("before=" + strconv.Itoa(Kept()) + "\n")
		runtime.GC()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			os.Stdout.WriteString("never placed\n")
			return
		}
		os.Stdout.WriteString("after=" + strconv.Itoa(Kept()) + "\n")
		return
	}
	for _, c := range []struct{ mib, want string }{
		{"64", "before=0\nafter=64\n"},
		{"0", "before=0\nafter=0\n"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKeepAtFirstCollection$")
		cmd.Env = append(os.Environ(), "HEAPFLOOR_FIRST_CHILD="+c.mib, "GOGC=off", "GOMEMLIMIT=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("KeepAtFirstCollection(%s): want %q in the child's output:\n%s", c.mib, c.want, out)
		}
	}
}
