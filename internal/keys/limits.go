package keys

import "fmt"

// Keys of rate and concurrency limits (claim.lua enforces them):
//
//	PREFIX:{Q}:limits               hash: scope → definition "rate=R;per=MS;burst=B;conc=C"; scope "" the whole queue, else a function name
//	PREFIX:{Q}:lim:rate:SCOPE       string: the scope's GCRA theoretical arrival time, integer µs
//	PREFIX:{Q}:lim:run:SCOPE        set: ids of the running tasks holding one of the scope's concurrency slots
//
// SCOPE is "q" for the whole queue and "f:NAME" for function NAME: the two cannot collide.

// Limits is the hash of the queue's limit definitions, by scope ("" the whole queue,
// else a function name).
func (q Queue) Limits() string { return q.base + "limits" }

// LimitPrefix is the prefix of the limits' state keys: claim.lua appends
// "rate:SCOPE" or "run:SCOPE".
func (q Queue) LimitPrefix() string { return q.base + "lim:" }

// LimitScope is the state-key scope of a limit on function fn ("" the whole queue).
func LimitScope(fn string) string {
	if fn == "" {
		return "q"
	}
	return "f:" + fn
}

// LimitRate is the string holding the GCRA state (theoretical arrival time, µs) of
// the limit on function fn ("" the whole queue).
func (q Queue) LimitRate(fn string) string { return q.base + "lim:rate:" + LimitScope(fn) }

// LimitRun is the set of task ids holding a concurrency slot of the limit on function
// fn ("" the whole queue).
func (q Queue) LimitRun(fn string) string { return q.base + "lim:run:" + LimitScope(fn) }

// MaxFunctionName is the longest function name a limit may name.
const MaxFunctionName = 128

// ValidLimitFunction reports whether fn may be named by a limit: 1..128 bytes of
// [A-Za-z0-9_.:/-] (no ';' or '=', which the definition uses, no spaces or braces).
func ValidLimitFunction(fn string) error {
	if len(fn) > MaxFunctionName {
		return fmt.Errorf("function name is %d bytes, more than %d", len(fn), MaxFunctionName)
	}
	if len(fn) == 0 || !NameChars(fn, "_.:/-") {
		return fmt.Errorf("function name %q must match [A-Za-z0-9_.:/-]{1,%d}", fn, MaxFunctionName)
	}
	return nil
}
