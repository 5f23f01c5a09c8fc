package prefault

import (
	"reflect"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func TestEnabled(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v    string
		set  bool
		want bool
	}{
		{"", false, true}, {"", true, true}, {"true", true, true}, {"1", true, true},
		{"false", true, false}, {"0", true, false}, {"F", true, false}, {"FALSE", true, false},
		{"maybe", true, true}, // refused by the worker's configuration, on here
	} {
		if got := Enabled(c.v, c.set); got != c.want {
			t.Errorf("Enabled(%q, %v) = %v, want %v", c.v, c.set, got, c.want)
		}
	}
}

var data = []int{1, 2, 3} // in the executable's writable data

// The segments read from the auxiliary vector's program headers describe this very
// executable: a read-only one holds its code, a writable one its data.
func TestSegmentsDescribeTheExecutable(t *testing.T) {
	t.Parallel()
	gs := segments()
	if len(gs) == 0 {
		t.Fatal("no loaded segments")
	}
	in := func(addr uintptr, writable bool) bool {
		for _, g := range gs {
			if g.writable == writable && g.start <= addr && addr < g.end {
				return true
			}
		}
		return false
	}
	if code := reflect.ValueOf(TestEnabled).Pointer(); !in(code, false) {
		t.Errorf("code at %#x is in no read-only segment", code)
	}
	if d := uintptr(unsafe.Pointer(&data)); !in(d, true) {
		t.Errorf("data at %#x is in no writable segment", d)
	}
}

// faultsTouching counts the page faults this thread takes writing one byte of each page
// of b.
func faultsTouching(b []byte) int64 {
	var before, after syscall.Rusage
	_ = syscall.Getrusage(1 /* RUSAGE_THREAD */, &before)
	for i := 0; i < len(b); i += page {
		b[i] = 1
	}
	_ = syscall.Getrusage(1, &after)
	return after.Minflt - before.Minflt
}

// A populated range is written without a fault a page; an untouched one is not.
func TestPopulateMapsThePages(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const size = 256 * page
	mapped := func() []byte {
		b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Munmap(b) })
		return b
	}
	cold := mapped()
	if n := faultsTouching(cold); n < size/page/2 {
		t.Fatalf("touching %d fresh pages took %d faults: the count does not see them", size/page, n)
	}
	// The thread's count also takes what else faults on it between the two readings (a
	// signal handler, the race detector's shadow memory): rarely, a few dozen. That only
	// adds, so the fewest of three fresh mappings is the populated pages' own count.
	fewest := int64(size / page)
	for range 3 {
		warm := mapped()
		if !populate(uintptr(unsafe.Pointer(&warm[0])), uintptr(unsafe.Pointer(&warm[0]))+size, madvPopulateWrite) {
			t.Fatal("MADV_POPULATE_WRITE refused on a private anonymous mapping")
		}
		fewest = min(fewest, faultsTouching(warm))
	}
	if fewest > 8 {
		t.Fatalf("touching %d populated pages took %d faults at the fewest", size/page, fewest)
	}
}

// A fault is timed in microseconds at most on a machine that runs the tests, never
// negative; the mapping is done from 5 µs a fault on, not below.
func TestFaultCostDecides(t *testing.T) {
	t.Parallel()
	if d := faultCost(); d <= 0 || d > time.Second {
		t.Fatalf("a page fault timed at %v", d)
	}
	for _, c := range []struct {
		d    time.Duration
		want bool
	}{{0, false}, {1500 * time.Nanosecond, false}, {4999 * time.Nanosecond, false}, {5 * time.Microsecond, true},
		{25 * time.Microsecond, true}, {1<<63 - 1, true}} {
		if got := slow(c.d); got != c.want {
			t.Errorf("slow(%v) = %v, want %v", c.d, got, c.want)
		}
	}
}
