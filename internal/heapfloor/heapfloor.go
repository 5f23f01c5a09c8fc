// Package heapfloor keeps a Go process's garbage collector from running for every few
// megabytes allocated while its live heap is small. The collector's next target is
// the live heap times (1 + GOGC/100): a worker whose live heap is 2 MB collects every
// 2 MB allocated, dozens of times a second under load, and each collection takes a
// processor and stalls the loops that keep Redis busy. A floor is an allocation that
// counts as live heap and is never written: the target becomes (live + floor) × 2, so
// a small heap collects an order of magnitude less often, while a large one (a
// function holding hundreds of megabytes) barely notices.
//
// The floor is address space, not memory: its pages come fresh from the kernel, are
// never touched, and never become resident (the package's test checks the resident
// set). It does count as heap in the runtime's own figures (go_memstats_heap_alloc_bytes)
// and toward GOMEMLIMIT, where a floor near the limit would keep the collector running:
// under a memory limit the floor is at most an eighth of it (32 MiB of the 512 MiB the
// shipped worker Deployment gives GOMEMLIMIT; none under 8 MiB).
package heapfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"sync"
)

var (
	mu    sync.Mutex
	floor []byte // never read or written: only its size matters
)

// Keep gives the process a floor of mib MiB, once: the first call with mib > 0 sets
// it, and later calls change nothing. Under a memory limit (GOMEMLIMIT) the floor is
// at most an eighth of the limit. It returns the floor the process keeps, in MiB.
func Keep(mib int) int {
	mu.Lock()
	defer mu.Unlock()
	if limit := debug.SetMemoryLimit(-1); limit != math.MaxInt64 {
		mib = min(mib, int(limit>>20)/8)
	}
	if floor == nil && mib > 0 {
		// A large allocation from fresh arena space: the runtime knows its pages are
		// zero and does not clear them, so none is touched.
		floor = make([]byte, mib<<20)
	}
	return len(floor) >> 20
}

// KeepAtFirstCollection arranges Keep(mib) for right after the collector next runs
// (the process's first collection, when called at start), and returns a channel closed
// once that Keep has returned. A floor placed before any collection starts one by
// itself: it counts as live heap far above the first target (4 MiB), so the
// allocation sets the collector going at once, with its mark workers, its sweep and
// the first touch of the runtime's span lists, about 190 page faults and 3 ms of CPU
// in a worker's start on a 2-core VM. Placed here, a process that never allocates its
// way to a first collection (a worker started for a few tasks and stopped again)
// never pays for one, and a busy process gets its floor after its first collection,
// in time for every later one. mib <= 0 arranges nothing and returns a closed channel.
func KeepAtFirstCollection(mib int) <-chan struct{} {
	done := make(chan struct{})
	if mib <= 0 {
		close(done)
		return done
	}
	// a sentinel the collector frees at its next cycle; 64 bytes, not a tiny object
	// (those share a block with others, whose cleanup may wait for their neighbours)
	runtime.AddCleanup(new([64]byte), func(done chan struct{}) {
		Keep(mib)
		close(done)
	}, done)
	return done
}

// Kept is the floor the process keeps, in MiB (0: none).
func Kept() int {
	mu.Lock()
	defer mu.Unlock()
	return len(floor) >> 20
}
