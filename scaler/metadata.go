package scaler

import (
	"errors"
	"fmt"
	"math"
	"reflect"
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

// ownKeys are the keys of Metadata, in the order of its fields.
var ownKeys = func() []string {
	var ks []string
	for _, f := range metadataFields {
		ks = append(ks, f.key)
	}
	return ks
}()

// Metadata is the parsed trigger metadata of one ScaledObject.
//
// Each field's metadata tag names its key and how ParseMetadata decodes it:
// "name=KEY", then "optional" (a key that may be left out), "default=VALUE" (the value
// of a key left out, decoded as a given one), "emptyIsUnset" (an empty value counts as
// left out) and, for a required key, "help=TEXT" (what the missing key's error asks
// for). The field's type picks the parser (decoders).
type Metadata struct {
	// Queues are the queues watched; their signals add up.
	Queues []string `metadata:"name=queues, help=a comma-separated list of queue names"`
	// Priorities are the bands watched (9 is the most urgent).
	Priorities queuestat.Bands `metadata:"name=priorities, optional, default=all"`
	// TargetPerReplica is the backlog one replica should carry: the HPA runs
	// ceil(backlog / TargetPerReplica) replicas.
	TargetPerReplica float64 `metadata:"name=targetPerReplica, optional, default=16"`
	// ActivationThreshold: the trigger is active (scales from zero) while the backlog
	// exceeds it.
	ActivationThreshold float64 `metadata:"name=activationThreshold, optional, default=0"`
	// IncludePending counts delivered, unacknowledged entries: work in progress, and the
	// entries of a worker that was SIGKILLed at scale-in, which only a live worker reclaims.
	IncludePending bool `metadata:"name=includePending, optional, default=true"`
	// IncludeScheduled counts delayed tasks and retries that are due (and due within
	// ScheduledLead): with no worker running, no scheduler moves them onto a stream.
	IncludeScheduled bool `metadata:"name=includeScheduled, optional, default=true"`
	// ScheduledLead counts scheduled tasks that fall due this long ahead, so workers
	// are up when they do.
	ScheduledLead time.Duration `metadata:"name=scheduledLead, optional, default=0"`
	// BandTargets give groups of bands their own metric and target, so urgent bands
	// scale harder: the HPA takes the largest replica count over all metrics.
	BandTargets []BandTarget `metadata:"name=bandTargets, optional, emptyIsUnset"`
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
	var m Metadata
	given, err := decodeMetadata(md, &m)
	if err != nil {
		return m, err
	}
	if err := m.Validate(); err != nil {
		var me *MetadataError
		if errors.As(err, &me) {
			if k, ok := given[me.Key]; ok {
				me.Key = k
			}
		}
		return m, err
	}
	return m, nil
}

// metadataField is one tagged field of Metadata.
type metadataField struct {
	index        int
	key          string
	optional     bool
	def          *string // the value of a key left out; nil: the zero value
	emptyIsUnset bool
	help         string
}

// metadataFields are Metadata's fields, read from their tags once.
var metadataFields = func() []metadataField {
	t := reflect.TypeFor[Metadata]()
	var fs []metadataField
	for i := range t.NumField() {
		tag, ok := t.Field(i).Tag.Lookup("metadata")
		if !ok {
			continue
		}
		if _, ok := decoders[t.Field(i).Type]; !ok {
			panic("scaler: no decoder for metadata field " + t.Field(i).Name)
		}
		f := metadataField{index: i}
		for _, opt := range strings.Split(tag, ",") {
			name, value, _ := strings.Cut(strings.TrimSpace(opt), "=")
			switch name {
			case "name":
				f.key = value
			case "optional":
				f.optional = true
			case "default":
				f.def = &value
			case "emptyIsUnset":
				f.emptyIsUnset = true
			case "help":
				f.help = value
			default:
				panic("scaler: metadata tag option " + name + " of " + t.Field(i).Name)
			}
		}
		fs = append(fs, f)
	}
	return fs
}()

// decoders parse a value given for a field of each type.
var decoders = map[reflect.Type]func(string) (any, error){
	reflect.TypeFor[[]string]():        func(s string) (any, error) { return parseList(s), nil },
	reflect.TypeFor[queuestat.Bands](): func(s string) (any, error) { return ParseBands(s) },
	reflect.TypeFor[float64]():         func(s string) (any, error) { return parseNumber(s) },
	reflect.TypeFor[bool]():            func(s string) (any, error) { return parseBool(s) },
	reflect.TypeFor[time.Duration]():   func(s string) (any, error) { return parseDuration(s) },
	reflect.TypeFor[[]BandTarget]():    func(s string) (any, error) { return parseBandTargets(s) },
}

// decodeMetadata decodes md into the tagged fields of *m: a key may be given as itself
// or as KEY+"FromEnv" (not both), KEDA's own keys are skipped and any other key is an
// error that suggests the nearest known one. The defaults are set first; then the
// fields are decoded in order, and the first bad value is the error, naming the key as
// it was given. It returns the key each given field came as.
func decodeMetadata(md map[string]string, m *Metadata) (given map[string]string, err error) {
	vals := map[string]string{}
	given = map[string]string{} // canonical key → the key it was given as
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
			return nil, &MetadataError{Key: k, Err: unknownKey(k)}
		}
		if prev, ok := given[base]; ok {
			return nil, badKey(k, "given twice, also as %q", prev)
		}
		given[base] = k
		vals[base] = strings.TrimSpace(md[k])
	}
	v := reflect.ValueOf(m).Elem()
	set := func(f metadataField, s, key string) error {
		x, err := decoders[v.Field(f.index).Type()](s)
		if err != nil {
			v.Field(f.index).SetZero()
			return &MetadataError{Key: key, Err: err}
		}
		v.Field(f.index).Set(reflect.ValueOf(x))
		return nil
	}
	for _, f := range metadataFields {
		if f.def != nil {
			if err := set(f, *f.def, f.key); err != nil {
				panic("scaler: default of metadata key " + f.key + ": " + err.Error())
			}
		}
	}
	for _, f := range metadataFields {
		s, ok := vals[f.key]
		if ok && s == "" && (f.emptyIsUnset || !f.optional) {
			ok = false
		}
		switch {
		case ok:
			if err := set(f, s, given[f.key]); err != nil {
				return given, err
			}
		case !f.optional:
			return given, badKey(f.key, "is required: %s (or set %sFromEnv)", f.help, f.key)
		}
	}
	return given, nil
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

// parseList reads a comma-separated list, each item trimmed.
func parseList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		out = append(out, strings.TrimSpace(x))
	}
	return out
}

func parseBool(s string) (bool, error) {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("%q is not true or false", s)
	}
	return b, nil
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
