package prom

import (
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
)

// scalar is one series without labels of a family read at scrape time.
type scalar struct {
	name string
	kind kind
	v    float64
}

// scrapeCollector reads its families when the registry is written.
type scrapeCollector func() []family

func (f scrapeCollector) families() []family { return f() }

func scalarFamily(s scalar) family {
	return family{s.name, func(b *bytes.Buffer) {
		header(b, s.name, runtimeHelp(s.name), s.kind)
		sample(b, s.name, nil, "", "", floatValue(s.v))
	}}
}

// runtimeHelp is the help of the Go runtime and process families, as client_golang's
// default Go collector (memory statistics from runtime/metrics, and the
// runtime/metrics of /gc/gogc, /gc/gomemlimit and /sched/gomaxprocs) and process
// collector word it.
var runtimeHelps = [...]struct{ name, help string }{
	{"go_gc_duration_seconds", "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles."},
	{"go_gc_gogc_percent", "Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function. Sourced from /gc/gogc:percent."},
	{"go_gc_gomemlimit_bytes", "Go runtime memory limit configured by the user, otherwise math.MaxInt64. This value is set by the GOMEMLIMIT environment variable, and the runtime/debug.SetMemoryLimit function. Sourced from /gc/gomemlimit:bytes."},
	{"go_goroutines", "Number of goroutines that currently exist."},
	{"go_info", "Information about the Go environment."},
	{"go_memstats_alloc_bytes", "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes."},
	{"go_memstats_alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes."},
	{"go_memstats_buck_hash_sys_bytes", "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes."},
	{"go_memstats_frees_total", "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects."},
	{"go_memstats_gc_sys_bytes", "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes."},
	{"go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes."},
	{"go_memstats_heap_idle_bytes", "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes."},
	{"go_memstats_heap_inuse_bytes", "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes"},
	{"go_memstats_heap_objects", "Number of currently allocated objects. Equals to /gc/heap/objects:objects."},
	{"go_memstats_heap_released_bytes", "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes."},
	{"go_memstats_heap_sys_bytes", "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes."},
	{"go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection."},
	{"go_memstats_mallocs_total", "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects."},
	{"go_memstats_mcache_inuse_bytes", "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes."},
	{"go_memstats_mcache_sys_bytes", "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes."},
	{"go_memstats_mspan_inuse_bytes", "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes."},
	{"go_memstats_mspan_sys_bytes", "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes."},
	{"go_memstats_next_gc_bytes", "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes."},
	{"go_memstats_other_sys_bytes", "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes."},
	{"go_memstats_stack_inuse_bytes", "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes."},
	{"go_memstats_stack_sys_bytes", "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes."},
	{"go_memstats_sys_bytes", "Number of bytes obtained from system. Equals to /memory/classes/total:byte."},
	{"go_sched_gomaxprocs_threads", "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously. Sourced from /sched/gomaxprocs:threads."},
	{"go_threads", "Number of OS threads created."},
	{"process_cpu_seconds_total", "Total user and system CPU time spent in seconds."},
	{"process_max_fds", "Maximum number of open file descriptors."},
	{"process_network_receive_bytes_total", "Number of bytes received by the process over the network."},
	{"process_network_transmit_bytes_total", "Number of bytes sent by the process over the network."},
	{"process_open_fds", "Number of open file descriptors."},
	{"process_resident_memory_bytes", "Resident memory size in bytes."},
	{"process_start_time_seconds", "Start time of the process since unix epoch in seconds."},
	{"process_virtual_memory_bytes", "Virtual memory size in bytes."},
	{"process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes."},
}

// runtimeHelp is the help of family name (a table, not a map: nothing to build at
// initialisation).
func runtimeHelp(name string) string {
	for _, h := range runtimeHelps {
		if h.name == name {
			return h.help
		}
	}
	return ""
}

// NewGoCollector returns the Go runtime's metrics, read at each scrape: the families
// of client_golang's default Go collector.
func NewGoCollector() Collector {
	return scrapeCollector(func() []family {
		var fams []family
		add := func(name string, k kind, v float64) { fams = append(fams, scalarFamily(scalar{name, k, v})) }
		add("go_goroutines", kindGauge, float64(runtime.NumGoroutine()))
		threads, _ := runtime.ThreadCreateProfile(nil)
		add("go_threads", kindGauge, float64(threads))

		var stats debug.GCStats
		stats.PauseQuantiles = make([]time.Duration, 5)
		debug.ReadGCStats(&stats)
		fams = append(fams, family{"go_gc_duration_seconds", func(b *bytes.Buffer) {
			const name = "go_gc_duration_seconds"
			header(b, name, runtimeHelp(name), kindSummary)
			for i, q := range stats.PauseQuantiles {
				sample(b, name, nil, "quantile", formatFloat(float64(i)/float64(len(stats.PauseQuantiles)-1)), floatValue(q.Seconds()))
			}
			sample(b, name+"_sum", nil, "", "", floatValue(stats.PauseTotal.Seconds()))
			sample(b, name+"_count", nil, "", "", uintValue(uint64(stats.NumGC)))
		}})
		add("go_memstats_last_gc_time_seconds", kindGauge, float64(stats.LastGC.UnixNano())/1e9)
		fams = append(fams, family{"go_info", func(b *bytes.Buffer) {
			header(b, "go_info", runtimeHelp("go_info"), kindGauge)
			sample(b, "go_info", []pair{{"version", runtime.Version()}}, "", "", floatValue(1))
		}})

		// The memory statistics from ReadMemStats (a stop of the world of microseconds, at
		// a scrape): runtime/metrics reads the same without one, but linking that package
		// costs every start its initialiser (0.5-0.9 ms where page faults are slow).
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		gauge := func(name string, v uint64) { add("go_memstats_"+name, kindGauge, float64(v)) }
		counter := func(name string, v uint64) { add("go_memstats_"+name, kindCounter, float64(v)) }
		gauge("alloc_bytes", ms.HeapAlloc)
		counter("alloc_bytes_total", ms.TotalAlloc)
		gauge("sys_bytes", ms.Sys)
		counter("mallocs_total", ms.Mallocs)
		counter("frees_total", ms.Frees)
		gauge("heap_alloc_bytes", ms.HeapAlloc)
		gauge("heap_sys_bytes", ms.HeapSys)
		gauge("heap_idle_bytes", ms.HeapIdle)
		gauge("heap_inuse_bytes", ms.HeapInuse)
		gauge("heap_released_bytes", ms.HeapReleased)
		gauge("heap_objects", ms.HeapObjects)
		gauge("stack_inuse_bytes", ms.StackInuse)
		gauge("stack_sys_bytes", ms.StackSys)
		gauge("mspan_inuse_bytes", ms.MSpanInuse)
		gauge("mspan_sys_bytes", ms.MSpanSys)
		gauge("mcache_inuse_bytes", ms.MCacheInuse)
		gauge("mcache_sys_bytes", ms.MCacheSys)
		gauge("buck_hash_sys_bytes", ms.BuckHashSys)
		gauge("gc_sys_bytes", ms.GCSys)
		gauge("other_sys_bytes", ms.OtherSys)
		gauge("next_gc_bytes", ms.NextGC)
		// as runtime/metrics reports it: off (-1) as the largest uint64
		add("go_gc_gogc_percent", kindGauge, float64(uint64(int64(startGOGC()))))
		add("go_gc_gomemlimit_bytes", kindGauge, float64(debug.SetMemoryLimit(-1))) // negative: read only
		add("go_sched_gomaxprocs_threads", kindGauge, float64(runtime.GOMAXPROCS(0)))
		return fams
	})
}

// startGOGC is the GC percentage the process started with, as the runtime reads its
// GOGC variable (off: -1; not a number: 100). The runtime offers no read of the value in
// force but runtime/metrics (see NewGoCollector), and a read by debug.SetGCPercent writes
// it (a program's own SetGCPercent could then be handed the read's value as the one it
// replaced); a program that changes it at run time is not seen here.
var startGOGC = sync.OnceValue(func() int { return parseGOGC(os.Getenv("GOGC")) })

// parseGOGC reads a GOGC value as the runtime does: "off" or a negative number -1, a
// decimal int32 itself, anything else 100.
func parseGOGC(v string) int {
	if v == "off" {
		return -1
	}
	if strings.HasPrefix(v, "+") {
		return 100 // the runtime's atoi takes no sign but '-'
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 100
	}
	return max(int(n), -1)
}

// userHZ is the kernel's USER_HZ, the unit of times in /proc (procfs assumes 100).
const userHZ = 100

// NewProcessCollector returns the process's metrics from /proc, read at each scrape:
// the families of client_golang's process collector on Linux. What cannot be read
// is left out (elsewhere than Linux: all of it).
func NewProcessCollector() Collector {
	return scrapeCollector(func() []family {
		var fams []family
		add := func(name string, k kind, v float64) { fams = append(fams, scalarFamily(scalar{name, k, v})) }
		if st, err := os.ReadFile("/proc/self/stat"); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i >= 0 {
				f := strings.Fields(string(st[i+1:]))
				if len(f) > 21 {
					num := func(j int) float64 { n, _ := strconv.ParseFloat(f[j], 64); return n }
					add("process_cpu_seconds_total", kindCounter, (num(11)+num(12))/userHZ)
					add("process_virtual_memory_bytes", kindGauge, num(20))
					add("process_resident_memory_bytes", kindGauge, num(21)*float64(os.Getpagesize()))
					if bt, ok := bootTime(); ok {
						add("process_start_time_seconds", kindGauge, bt+num(19)/userHZ)
					}
				}
			}
		}
		if d, err := os.Open("/proc/self/fd"); err == nil {
			names, err := d.Readdirnames(-1)
			_ = d.Close()
			if err == nil {
				add("process_open_fds", kindGauge, float64(len(names)))
			}
		}
		if lim, err := os.ReadFile("/proc/self/limits"); err == nil {
			for _, line := range strings.Split(string(lim), "\n") {
				switch {
				case strings.HasPrefix(line, "Max open files "):
					add("process_max_fds", kindGauge, limitValue(line[len("Max open files "):]))
				case strings.HasPrefix(line, "Max address space "):
					add("process_virtual_memory_max_bytes", kindGauge, limitValue(line[len("Max address space "):]))
				}
			}
		}
		if in, out, ok := netOctets(); ok {
			add("process_network_receive_bytes_total", kindCounter, in)
			add("process_network_transmit_bytes_total", kindCounter, out)
		}
		return fams
	})
}

// limitValue reads the soft limit of a /proc/self/limits line's rest; "unlimited" is
// the largest uint64, as procfs reads it.
func limitValue(rest string) float64 {
	f := strings.Fields(rest)
	if len(f) == 0 {
		return 0
	}
	if f[0] == "unlimited" {
		return float64(uint64(18446744073709551615))
	}
	n, _ := strconv.ParseUint(f[0], 10, 64)
	return float64(n)
}

// bootTime is the btime line of /proc/stat.
func bootTime() (float64, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "btime "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return n, err == nil
		}
	}
	return 0, false
}

// netOctets reads IpExt's InOctets and OutOctets from /proc/self/net/netstat (0 when
// a field is missing, as procfs leaves it nil).
func netOctets() (in, out float64, ok bool) {
	b, err := os.ReadFile("/proc/self/net/netstat")
	if err != nil {
		return 0, 0, false
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "IpExt:" || len(values) != len(names) {
			continue
		}
		for j, n := range names {
			v, _ := strconv.ParseFloat(values[j], 64)
			switch n {
			case "InOctets":
				in = v
			case "OutOctets":
				out = v
			}
		}
	}
	return in, out, true
}
