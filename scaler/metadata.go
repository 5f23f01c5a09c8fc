package scaler

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/queuestat"
)

// Metadata keys of a ScaledObject trigger. Each can also be given as KEY+"FromEnv",
// naming an environment variable of the scale target that KEDA resolves.
const (
	KeyQueues              = "queues"
	KeyPriorities          = "priorities"
	KeyTargetPerReplica    = "targetPerReplica"
	KeyActivationThreshold = "activationThreshold"
	KeyIncludePending      = "includePending"
	KeyIncludeScheduled    = "includeScheduled"
	KeyScheduledLead       = "scheduledLead"
	KeyBandTargets         = "bandTargets"
)

// Defaults of the optional keys.
const (
	DefaultPriorities          = "all"
	DefaultTargetPerReplica    = 16.0 // the worker's default DTQ_WORKER_CONCURRENCY
	DefaultActivationThreshold = 0.0
	DefaultIncludePending      = true
	DefaultIncludeScheduled    = true
	DefaultScheduledLead       = time.Duration(0)
)

// Limits on what one trigger may ask for, so one ScaledObject cannot make every read
// of every other one slow.
const (
	MaxQueues        = 256
	MaxScheduledLead = 24 * time.Hour
	maxTarget        = 1e12
)

// kedaKeys are keys KEDA's external trigger reads itself and passes on to the scaler
// with the rest of the metadata (pkg/scalers/external_scaler.go sends the trigger's
// metadata whole). They are accepted and ignored.
var kedaKeys = []string{"scalerAddress", "enableTLS", "unsafeSsl", "caCert",
	"tlsCertFile", "tlsClientCert", "tlsClientKey"}

var ownKeys = []string{KeyQueues, KeyPriorities, KeyTargetPerReplica, KeyActivationThreshold,
	KeyIncludePending, KeyIncludeScheduled, KeyScheduledLead, KeyBandTargets}

// Metadata is the parsed trigger metadata of one ScaledObject.
type Metadata struct {
	// Queues are the queues watched; their signals add up.
	Queues []string
	// Priorities are the bands watched (9 is the most urgent).
	Priorities queuestat.Bands
	// TargetPerReplica is the backlog one replica should carry: the HPA runs
	// ceil(backlog / TargetPerReplica) replicas.
	TargetPerReplica float64
	// ActivationThreshold: the trigger is active (scales from zero) while the backlog
	// exceeds it.
	ActivationThreshold float64
	// IncludePending counts delivered, unacknowledged entries: work in progress, and the
	// entries of a worker that was SIGKILLed at scale-in, which only a live worker reclaims.
	IncludePending bool
	// IncludeScheduled counts delayed tasks and retries that are due (and due within
	// ScheduledLead): with no worker running, no scheduler moves them onto a stream.
	IncludeScheduled bool
	// ScheduledLead counts scheduled tasks that fall due this long ahead, so workers
	// are up when they do.
	ScheduledLead time.Duration
	// BandTargets give groups of bands their own metric and target, so urgent bands
	// scale harder: the HPA takes the largest replica count over all metrics.
	BandTargets []BandTarget
}

// BandTarget is one band group with its own target.
type BandTarget struct {
	Hi, Lo int // bands Hi down to Lo
	Target float64
}

// Bands is the set of bands of the group.
func (g BandTarget) Bands() queuestat.Bands {
	var b queuestat.Bands
	for p := g.Lo; p <= g.Hi; p++ {
		b |= queuestat.Band(p)
	}
	return b
}

// MetadataError names the metadata key a bad value came from.
type MetadataError struct {
	Key string
	Err error
}

func (e *MetadataError) Error() string { return fmt.Sprintf("metadata %q: %v", e.Key, e.Err) }
func (e *MetadataError) Unwrap() error { return e.Err }

func badKey(key, format string, a ...any) error {
	return &MetadataError{Key: key, Err: fmt.Errorf(format, a...)}
}

// ParseMetadata reads trigger metadata as KEDA sends it. Unknown keys are an error;
// the keys KEDA's own external trigger reads are accepted and ignored.
func ParseMetadata(md map[string]string) (Metadata, error) {
	vals := map[string]string{}
	from := map[string]string{} // canonical key → the key it was given as
	names := make([]string, 0, len(md))
	for k := range md {
		names = append(names, k)
	}
	sort.Strings(names) // the same metadata always yields the same first error
	for _, k := range names {
		base := strings.TrimSuffix(k, "FromEnv")
		if slices.Contains(kedaKeys, base) {
			continue
		}
		if !slices.Contains(ownKeys, base) {
			return Metadata{}, &MetadataError{Key: k, Err: unknownKey(k)}
		}
		if prev, ok := from[base]; ok {
			return Metadata{}, badKey(k, "given twice, also as %q", prev)
		}
		from[base] = k
		vals[base] = strings.TrimSpace(md[k])
	}
	m := Metadata{
		Priorities:          queuestat.AllBands,
		TargetPerReplica:    DefaultTargetPerReplica,
		ActivationThreshold: DefaultActivationThreshold,
		IncludePending:      DefaultIncludePending,
		IncludeScheduled:    DefaultIncludeScheduled,
		ScheduledLead:       DefaultScheduledLead,
	}
	key := func(k string) string {
		if f, ok := from[k]; ok {
			return f
		}
		return k
	}
	v, ok := vals[KeyQueues]
	if !ok || v == "" {
		return m, badKey(KeyQueues, "is required: a comma-separated list of queue names (or set %sFromEnv)", KeyQueues)
	}
	for _, q := range strings.Split(v, ",") {
		m.Queues = append(m.Queues, strings.TrimSpace(q))
	}
	var err error
	if v, ok := vals[KeyPriorities]; ok {
		if m.Priorities, err = ParseBands(v); err != nil {
			return m, &MetadataError{Key: key(KeyPriorities), Err: err}
		}
	}
	if v, ok := vals[KeyTargetPerReplica]; ok {
		if m.TargetPerReplica, err = parseNumber(v); err != nil {
			return m, &MetadataError{Key: key(KeyTargetPerReplica), Err: err}
		}
	}
	if v, ok := vals[KeyActivationThreshold]; ok {
		if m.ActivationThreshold, err = parseNumber(v); err != nil {
			return m, &MetadataError{Key: key(KeyActivationThreshold), Err: err}
		}
	}
	if v, ok := vals[KeyIncludePending]; ok {
		if m.IncludePending, err = strconv.ParseBool(v); err != nil {
			return m, badKey(key(KeyIncludePending), "%q is not true or false", v)
		}
	}
	if v, ok := vals[KeyIncludeScheduled]; ok {
		if m.IncludeScheduled, err = strconv.ParseBool(v); err != nil {
			return m, badKey(key(KeyIncludeScheduled), "%q is not true or false", v)
		}
	}
	if v, ok := vals[KeyScheduledLead]; ok {
		if m.ScheduledLead, err = parseDuration(v); err != nil {
			return m, &MetadataError{Key: key(KeyScheduledLead), Err: err}
		}
	}
	if v, ok := vals[KeyBandTargets]; ok && v != "" {
		if m.BandTargets, err = parseBandTargets(v); err != nil {
			return m, &MetadataError{Key: key(KeyBandTargets), Err: err}
		}
	}
	if err := m.Validate(); err != nil {
		var me *MetadataError
		if errors.As(err, &me) {
			me.Key = key(me.Key)
		}
		return m, err
	}
	return m, nil
}

// Validate checks every rule, across keys too; errors are *MetadataError.
func (m Metadata) Validate() error {
	if len(m.Queues) == 0 {
		return badKey(KeyQueues, "must name at least one queue")
	}
	if len(m.Queues) > MaxQueues {
		return badKey(KeyQueues, "names %d queues, at most %d are allowed", len(m.Queues), MaxQueues)
	}
	seen := map[string]bool{}
	for _, q := range m.Queues {
		if err := keys.ValidQueue(q); err != nil {
			return badKey(KeyQueues, "%v", err)
		}
		if seen[q] {
			return badKey(KeyQueues, "queue %q is listed twice", q)
		}
		seen[q] = true
	}
	if m.Priorities&queuestat.AllBands == 0 || m.Priorities&^queuestat.AllBands != 0 {
		return badKey(KeyPriorities, "must hold bands 0..9 and at least one")
	}
	if !(m.TargetPerReplica > 0 && m.TargetPerReplica <= maxTarget) {
		return badKey(KeyTargetPerReplica, "%v must be above 0 and at most %g", m.TargetPerReplica, maxTarget)
	}
	if !(m.ActivationThreshold >= 0 && m.ActivationThreshold <= maxTarget) {
		return badKey(KeyActivationThreshold, "%v must be between 0 and %g", m.ActivationThreshold, maxTarget)
	}
	if m.ScheduledLead < 0 || m.ScheduledLead > MaxScheduledLead {
		return badKey(KeyScheduledLead, "%v must be between 0s and %v", m.ScheduledLead, MaxScheduledLead)
	}
	if m.ScheduledLead%time.Millisecond != 0 {
		return badKey(KeyScheduledLead, "%v must be whole milliseconds", m.ScheduledLead)
	}
	var covered queuestat.Bands
	for _, g := range m.BandTargets {
		if g.Lo < 0 || g.Hi > keys.MaxPriority || g.Lo > g.Hi {
			return badKey(KeyBandTargets, "group %s is not a band range within 0..9", g.label())
		}
		b := g.Bands()
		if b&^m.Priorities != 0 {
			return badKey(KeyBandTargets, "group %s holds bands outside %s", g.label(), KeyPriorities)
		}
		if b&covered != 0 {
			return badKey(KeyBandTargets, "group %s overlaps another group", g.label())
		}
		covered |= b
		if !(g.Target > 0 && g.Target <= maxTarget) {
			return badKey(KeyBandTargets, "group %s: target %v must be above 0 and at most %g", g.label(), g.Target, maxTarget)
		}
	}
	return nil
}

// ParseBands reads a band set: "all", a band ("9"), a range ("9-7" or "7-9"), or a
// comma-separated list of those ("9,5-3").
func ParseBands(s string) (queuestat.Bands, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "all") {
		return queuestat.AllBands, nil
	}
	if s == "" {
		return 0, errors.New(`is empty: want "all", a band 0..9, a range like 9-7, or a list like 9,5-3`)
	}
	var b queuestat.Bands
	for _, part := range strings.Split(s, ",") {
		hi, lo, err := parseRange(part)
		if err != nil {
			return 0, err
		}
		for p := lo; p <= hi; p++ {
			b |= queuestat.Band(p)
		}
	}
	return b, nil
}

// parseRange reads "7" or "9-7" (either order) into hi >= lo.
func parseRange(s string) (hi, lo int, err error) {
	s = strings.TrimSpace(s)
	a, z, isRange := strings.Cut(s, "-")
	x, err1 := parseBand(a)
	y := x
	var err2 error
	if isRange {
		y, err2 = parseBand(z)
	}
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%q is not a band 0..9 or a range of bands like 9-7", s)
	}
	return max(x, y), min(x, y), nil
}

func parseBand(s string) (int, error) {
	s = strings.TrimSpace(s)
	if len(s) != 1 || s[0] < '0' || s[0] > '9' {
		return 0, fmt.Errorf("%q is not a band 0..9", s)
	}
	return int(s[0] - '0'), nil
}

// parseBandTargets reads "9-8:2,7:4": comma-separated groups, each a band or a band
// range, a colon, and the group's target per replica.
func parseBandTargets(s string) ([]BandTarget, error) {
	var out []BandTarget
	for _, part := range strings.Split(s, ",") {
		r, t, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("%q: want BANDS:TARGET, like 9-8:2", strings.TrimSpace(part))
		}
		hi, lo, err := parseRange(r)
		if err != nil {
			return nil, err
		}
		target, err := parseNumber(t)
		if err != nil {
			return nil, fmt.Errorf("%q: target %w", strings.TrimSpace(part), err)
		}
		out = append(out, BandTarget{Hi: hi, Lo: lo, Target: target})
	}
	return out, nil
}

func parseNumber(s string) (float64, error) {
	s = strings.TrimSpace(s)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a finite number", s)
	}
	return f, nil
}

// parseDuration reads a Go duration ("90s", "5m") or a bare number of seconds.
func parseDuration(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > MaxScheduledLead.Seconds() {
			return 0, fmt.Errorf("%q must be between 0s and %v", s, MaxScheduledLead)
		}
		return time.Duration(f * float64(time.Second)).Truncate(time.Millisecond), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration like 30s or 5m", s)
	}
	return d.Truncate(time.Millisecond), nil
}

func (g BandTarget) label() string {
	if g.Hi == g.Lo {
		return strconv.Itoa(g.Hi)
	}
	return strconv.Itoa(g.Hi) + "-" + strconv.Itoa(g.Lo)
}

func unknownKey(k string) error {
	known := append(slices.Clone(ownKeys), kedaKeys...)
	best, bestD := "", 4
	for _, c := range known {
		if d := editDistance(strings.ToLower(k), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	if best != "" {
		return fmt.Errorf("unknown key (did you mean %q?); known keys: %s", best, strings.Join(ownKeys, ", "))
	}
	return fmt.Errorf("unknown key; known keys: %s", strings.Join(ownKeys, ", "))
}

// editDistance is the Levenshtein distance of short strings (keys are cut at 64 bytes).
func editDistance(a, b string) int {
	if len(a) > 64 {
		a = a[:64]
	}
	if len(b) > 64 {
		b = b[:64]
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Metric is one metric of a trigger: the backlog of some bands of the watched queues.
type Metric struct {
	Name      string
	Bands     queuestat.Bands
	Target    float64
	Scheduled bool // adds the due scheduled tasks (known per queue, not per band)
}

// Metrics lists the trigger's metrics: first the backlog of every watched band with
// TargetPerReplica (it also counts due scheduled tasks and decides activation), then one
// per band group. Names are stable: the same metadata always gives the same names, and
// the names of one trigger differ.
func (m Metadata) Metrics() []Metric {
	base := "dtq-" + queuePart(m.Queues)
	out := []Metric{{Name: base, Bands: m.Priorities, Target: m.TargetPerReplica, Scheduled: m.IncludeScheduled}}
	for _, g := range m.BandTargets {
		out = append(out, Metric{Name: base + "-p" + g.label(), Bands: g.Bands(), Target: g.Target})
	}
	return out
}

// queuePart renders queue names for a metric name: lowercase letters, digits and
// dashes, at most 40 bytes; a name that had to be changed to fit gets a hash of the
// exact list, so different lists do not read alike.
func queuePart(queues []string) string {
	joined := strings.Join(queues, "-")
	var b strings.Builder
	for _, r := range strings.ToLower(joined) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	s := b.String()
	if s == joined && len(s) <= 40 {
		return s
	}
	h := fnv.New32a()
	h.Write([]byte(strings.Join(queues, ",")))
	if len(s) > 31 {
		s = s[:31]
	}
	return fmt.Sprintf("%s-%08x", s, h.Sum32())
}

// Value is a metric's value over stats (the watched queues' signal) and the due
// scheduled tasks per queue.
func (m Metadata) Value(mt Metric, stats map[string]*queuestat.Stat, due map[string]int64) int64 {
	var n int64
	for _, q := range m.Queues {
		st := stats[q]
		if st == nil {
			continue
		}
		n = queuestat.Add(n, st.Backlog(mt.Bands, m.IncludePending))
		if mt.Scheduled {
			n = queuestat.Add(n, due[q])
		}
	}
	return n
}

// Active reports whether the backlog (the first metric's value) exceeds the activation
// threshold.
func (m Metadata) Active(backlog int64) bool {
	return float64(backlog) > m.ActivationThreshold
}
