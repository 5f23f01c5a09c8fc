package prom

import (
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
)

// gogcInForce reads the GC percentage the way client_golang does (runtime/metrics),
// without writing it: off (-1) reads as the largest uint64.
func gogcInForce() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// go_gc_gogc_percent is the percentage in force, in a process that did not change it
// at run time, as runtime/metrics reads it.
func TestStartGOGCIsTheOneInForce(t *testing.T) {
	if got, want := uint64(int64(startGOGC())), gogcInForce(); got != want {
		t.Fatalf("startGOGC() = %d, runtime/metrics reads %d", got, want)
	}
}

// GOGC values read as the runtime reads them.
func TestParseGOGC(t *testing.T) {
	for v, want := range map[string]int{"": 100, "off": -1, "50": 50, "0": 0, "-5": -1, "-1": -1, "+5": 100,
		"abc": 100, "99999999999": 100, "2147483647": 2147483647, "OFF": 100, " 50": 100} {
		if got := parseGOGC(v); got != want {
			t.Errorf("parseGOGC(%q) = %d, want %d", v, got, want)
		}
	}
}

// The memory families read from ReadMemStats agree with runtime/metrics's, through
// the equalities client_golang's help texts state (each value read once a side, so
// they may differ by what the reads allocate: a wrong field would differ by far more).
func TestMemStatsAgreeWithRuntimeMetrics(t *testing.T) {
	names := []string{"/gc/heap/tiny/allocs:objects", "/gc/heap/allocs:objects", "/gc/heap/frees:objects",
		"/gc/heap/allocs:bytes", "/gc/heap/objects:objects", "/gc/heap/goal:bytes", "/memory/classes/total:bytes",
		"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes", "/memory/classes/heap/released:bytes",
		"/memory/classes/heap/free:bytes", "/memory/classes/heap/stacks:bytes", "/memory/classes/os-stacks:bytes",
		"/memory/classes/metadata/mspan/inuse:bytes", "/memory/classes/metadata/mspan/free:bytes",
		"/memory/classes/metadata/mcache/inuse:bytes", "/memory/classes/metadata/mcache/free:bytes",
		"/memory/classes/profiling/buckets:bytes", "/memory/classes/metadata/other:bytes", "/memory/classes/other:bytes"}
	runtime.GC()
	got := map[string]float64{}
	reg := NewRegistry()
	reg.MustRegister(NewGoCollector())
	for _, l := range strings.Split(body(t, Handler(reg), ""), "\n") {
		if f := strings.Fields(l); len(f) == 2 && strings.HasPrefix(f[0], "go_memstats_") {
			v, _ := strconv.ParseFloat(f[1], 64)
			got[strings.TrimPrefix(f[0], "go_memstats_")] = v
		}
	}
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	m := map[string]float64{}
	for i, n := range names {
		m[n] = float64(s[i].Value.Uint64())
	}
	heap := m["/memory/classes/heap/objects:bytes"]
	want := map[string]float64{
		"alloc_bytes": heap, "heap_alloc_bytes": heap,
		"alloc_bytes_total": m["/gc/heap/allocs:bytes"],
		"sys_bytes":         m["/memory/classes/total:bytes"],
		"mallocs_total":     m["/gc/heap/allocs:objects"] + m["/gc/heap/tiny/allocs:objects"],
		"frees_total":       m["/gc/heap/frees:objects"] + m["/gc/heap/tiny/allocs:objects"],
		"heap_inuse_bytes":  heap + m["/memory/classes/heap/unused:bytes"],
		"heap_idle_bytes":   m["/memory/classes/heap/released:bytes"] + m["/memory/classes/heap/free:bytes"],
		"heap_sys_bytes": heap + m["/memory/classes/heap/unused:bytes"] + m["/memory/classes/heap/released:bytes"] +
			m["/memory/classes/heap/free:bytes"],
		"heap_released_bytes": m["/memory/classes/heap/released:bytes"],
		"heap_objects":        m["/gc/heap/objects:objects"],
		"stack_inuse_bytes":   m["/memory/classes/heap/stacks:bytes"],
		"stack_sys_bytes":     m["/memory/classes/heap/stacks:bytes"] + m["/memory/classes/os-stacks:bytes"],
		"mspan_inuse_bytes":   m["/memory/classes/metadata/mspan/inuse:bytes"],
		"mspan_sys_bytes":     m["/memory/classes/metadata/mspan/inuse:bytes"] + m["/memory/classes/metadata/mspan/free:bytes"],
		"mcache_inuse_bytes":  m["/memory/classes/metadata/mcache/inuse:bytes"],
		"mcache_sys_bytes":    m["/memory/classes/metadata/mcache/inuse:bytes"] + m["/memory/classes/metadata/mcache/free:bytes"],
		"buck_hash_sys_bytes": m["/memory/classes/profiling/buckets:bytes"],
		"gc_sys_bytes":        m["/memory/classes/metadata/other:bytes"],
		"other_sys_bytes":     m["/memory/classes/other:bytes"],
		"next_gc_bytes":       m["/gc/heap/goal:bytes"],
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("go_memstats_%s missing", name)
			continue
		}
		if d := g - w; d > 512<<10+w/4 || -d > 512<<10+w/4 {
			t.Errorf("go_memstats_%s = %.0f, runtime/metrics says %.0f", name, g, w)
		}
	}
}
