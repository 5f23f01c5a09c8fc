package runtime

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/dtq/dtq/lua"
)

// holdings is what the worker holds, shared by its services: every execution started
// and not yet settled (recorded or handed back), and the counters the poller, reaper,
// heartbeat and drain read. The poller and the reaper add; the completer and the
// drain's hand-back release; the heartbeat and the reaper touch what is held.
type holdings struct {
	mu   sync.Mutex
	held map[heldKey]*execution

	inflight atomic.Int64 // started and not yet returned (a slot of the concurrency)
	begun    atomic.Int64 // tasks started since Run began (DTQ_WORKER_MAX_TASKS)
	active   atomic.Int64 // unix ns of the last start or finish (DTQ_WORKER_IDLE_EXIT_S)
	// slotFree is signalled when an execution returns: the poller waits on it at full
	// capacity, the drain while functions run.
	slotFree chan struct{}
	// touching is held (cap 1) by a heartbeat's touch pass, from its snapshot of what is
	// held to its last touch, and by the drain's hand-back around its touch back: a pass
	// whose snapshot still holds an execution being handed back must not touch its entry
	// (idle 0) after the hand-back set it to the visibility timeout.
	touching chan struct{}
	// afterSnapshot, when set (tests), runs in a touch pass after its snapshot.
	afterSnapshot func()
}

func newHoldings() *holdings {
	return &holdings{held: map[heldKey]*execution{}, slotFree: make(chan struct{}, 1), touching: make(chan struct{}, 1)}
}

// beginTouch takes the touch pass (waiting at most wait; 0: as long as it takes) and
// reports whether it got it.
func (h *holdings) beginTouch(wait time.Duration) bool {
	if wait <= 0 {
		h.touching <- struct{}{}
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case h.touching <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

// endTouch gives the touch pass back.
func (h *holdings) endTouch() { <-h.touching }

func (h *holdings) add(e *execution) {
	h.mu.Lock()
	h.held[e.key()] = e
	h.mu.Unlock()
}

// remove forgets e (when it is still the execution held under its key).
func (h *holdings) remove(e *execution) {
	h.mu.Lock()
	if k := e.key(); h.held[k] == e {
		delete(h.held, k)
	}
	h.mu.Unlock()
}

// holds reports whether an execution held now runs from entry of queue's band.
func (h *holdings) holds(queue string, band int, entry string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.held[heldKey{queue, band, entry}]
	return ok
}

// freed wakes whoever waits for a slot.
func (h *holdings) freed() {
	select {
	case h.slotFree <- struct{}{}:
	default:
	}
}

// entries lists, by queue, the entries of the executions held now.
func (h *holdings) entries() map[string][]lua.Delivered {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]lua.Delivered{}
	for k := range h.held {
		out[k.queue] = append(out[k.queue], lua.Delivered{Band: k.band, Entry: k.entry})
	}
	return out
}

// byQueue lists the executions held now, by queue.
func (h *holdings) byQueue() map[string][]*execution {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]*execution{}
	for _, e := range h.held {
		out[e.queue] = append(out[e.queue], e)
	}
	return out
}

// unrecorded takes the fate of every held execution whose outcome has not gone to the
// completer (the drain's give-up: cancelled, detached, or never started).
func (h *holdings) unrecorded() []*execution {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*execution
	for _, e := range h.held {
		if e.recorded.CompareAndSwap(false, true) {
			out = append(out, e)
		}
	}
	return out
}
