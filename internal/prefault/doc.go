// Package prefault maps, in a few system calls, the pages a process's start would
// otherwise fault in one at a time: the executable's code and read-only data, its data
// and the zeroed data after it, and the Go heap after the first allocation. Where a page
// fault is slow — a virtual machine whose faults cost tens of microseconds — the
// hundreds a worker takes from exec to its first task are most of its start; where a
// fault is fast, mapping the whole executable costs the start more than the faults it
// saves. So importing the package first times a page fault (the least of three first
// writes to fresh pages), and in its initialiser, on Linux 5.14 or later
// (MADV_POPULATE_READ and MADV_POPULATE_WRITE; elsewhere nothing happens), maps the
// pages only when a fault takes 5 µs or more. The cost is resident memory: pages the
// process would have touched later, or not at all (about 2.7 MB for an idle worker).
// DTQ_PREFAULT=false turns it off.
package prefault

import "strconv"

// Variable is the environment variable that turns the mapping off ("false", "0": off).
const Variable = "DTQ_PREFAULT"

// Enabled reports whether the value of Variable leaves the mapping on: unset, empty or
// true. A value strconv.ParseBool does not take leaves it on here; the worker's
// configuration refuses it at start, naming the variable.
func Enabled(v string, set bool) bool {
	if !set || v == "" {
		return true
	}
	b, err := strconv.ParseBool(v)
	return err != nil || b
}
