// Package prom is the worker's Prometheus instrumentation: counters, gauges and
// histograms (alone or by label values) on a registry that writes the text exposition
// format (version 0.0.4), plus the Go runtime's and the process's metrics under the
// names, help and types of client_golang's default Go and process collectors.
//
// It exists for the worker's cold start. client_golang's package initialisation builds
// its default registry with a Go and a process collector, and what it links (procfs,
// protobuf, expvar, common/model) initialises too: about half of what the dtq binary
// did before main. Here nothing runs at initialisation; the runtime and process
// metrics are read when /metrics is scraped.
package prom

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Labels are a metric's constant labels.
type Labels map[string]string

type kind uint8

const (
	kindCounter kind = iota
	kindGauge
	kindHistogram
	kindSummary
)

func (k kind) String() string {
	return [...]string{"counter", "gauge", "histogram", "summary"}[k]
}

// desc is what every series of a family shares.
type desc struct {
	name, help string
	kind       kind
	constNames []string // sorted
	constVals  []string
	varNames   []string // as declared
}

func newDesc(name, help string, k kind, constLabels Labels, varNames []string) desc {
	d := desc{name: name, help: help, kind: k, varNames: varNames}
	for n := range constLabels {
		d.constNames = append(d.constNames, n)
	}
	slices.Sort(d.constNames)
	for _, n := range d.constNames {
		d.constVals = append(d.constVals, constLabels[n])
	}
	return d
}

// labelPairs merges the constant labels with vals (for the variable ones), sorted by
// name as client_golang sorts them.
func (d *desc) labelPairs(vals []string) []pair {
	ps := make([]pair, 0, len(d.constNames)+len(vals))
	for i, n := range d.constNames {
		ps = append(ps, pair{n, d.constVals[i]})
	}
	for i, n := range d.varNames {
		ps = append(ps, pair{n, vals[i]})
	}
	slices.SortFunc(ps, func(a, b pair) int { return strings.Compare(a.name, b.name) })
	return ps
}

type pair struct{ name, value string }

// Collector is a family of series the registry writes.
type Collector interface {
	// write appends the family, HELP and TYPE first, to b; nothing when it has no
	// series. It returns the family's name, for the order.
	families() []family
}

type family struct {
	name  string
	write func(b *bytes.Buffer)
}

// Registry holds collectors and writes their exposition, families in name order.
type Registry struct {
	mu sync.Mutex
	cs []Collector
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

// MustRegister adds collectors.
func (r *Registry) MustRegister(cs ...Collector) {
	r.mu.Lock()
	r.cs = append(r.cs, cs...)
	r.mu.Unlock()
}

// WriteText appends the text exposition (format 0.0.4) of every collector to b.
func (r *Registry) WriteText(b *bytes.Buffer) {
	r.mu.Lock()
	cs := slices.Clone(r.cs)
	r.mu.Unlock()
	var fams []family
	for _, c := range cs {
		fams = append(fams, c.families()...)
	}
	slices.SortStableFunc(fams, func(a, b family) int { return strings.Compare(a.name, b.name) })
	for _, f := range fams {
		f.write(b)
	}
}

// header writes the HELP and TYPE lines of a family.
func header(b *bytes.Buffer, name, help string, k kind) {
	b.WriteString("# HELP ")
	b.WriteString(name)
	b.WriteByte(' ')
	writeEscaped(b, help, false)
	b.WriteString("\n# TYPE ")
	b.WriteString(name)
	b.WriteByte(' ')
	b.WriteString(k.String())
	b.WriteByte('\n')
}

// sample writes one line: name{labels[,extra="x"]} value.
func sample(b *bytes.Buffer, name string, ps []pair, extraName, extraValue string, value func(*bytes.Buffer)) {
	b.WriteString(name)
	if len(ps) > 0 || extraName != "" {
		b.WriteByte('{')
		for i, p := range ps {
			if i > 0 {
				b.WriteByte(',')
			}
			writePair(b, p.name, p.value)
		}
		if extraName != "" {
			if len(ps) > 0 {
				b.WriteByte(',')
			}
			writePair(b, extraName, extraValue)
		}
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	value(b)
	b.WriteByte('\n')
}

func writePair(b *bytes.Buffer, name, value string) {
	b.WriteString(name)
	b.WriteString(`="`)
	writeEscaped(b, value, true)
	b.WriteByte('"')
}

// writeEscaped escapes a backslash and a newline, and a double quote in a label value,
// as the text format wants.
func writeEscaped(b *bytes.Buffer, s string, quote bool) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '"' && quote:
			b.WriteString(`\"`)
		default:
			b.WriteByte(c)
		}
	}
}

// formatFloat formats f as the text format does (expfmt's writeFloat).
func formatFloat(f float64) string {
	switch {
	case f == 1:
		return "1"
	case f == 0:
		return "0"
	case f == -1:
		return "-1"
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, +1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func floatValue(f float64) func(*bytes.Buffer) {
	return func(b *bytes.Buffer) { b.WriteString(formatFloat(f)) }
}

func uintValue(u uint64) func(*bytes.Buffer) {
	return func(b *bytes.Buffer) { b.WriteString(strconv.FormatUint(u, 10)) }
}

// value is a float64 that can be added to and set atomically. Whole increments go to
// an integer part (one atomic add, as client_golang's counter does).
type value struct {
	bits atomic.Uint64 // float64 part
	ints atomic.Uint64 // integer part
}

func (v *value) get() float64 { return math.Float64frombits(v.bits.Load()) + float64(v.ints.Load()) }

func (v *value) add(f float64) {
	if u := uint64(f); f >= 0 && float64(u) == f {
		v.ints.Add(u)
		return
	}
	for {
		old := v.bits.Load()
		if v.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+f)) {
			return
		}
	}
}

func (v *value) set(f float64) {
	v.bits.Store(math.Float64bits(f))
	v.ints.Store(0)
}

// CounterOpts and GaugeOpts name and describe a metric.
type (
	CounterOpts struct {
		Name, Help  string
		ConstLabels Labels
	}
	GaugeOpts     CounterOpts
	HistogramOpts struct {
		Name, Help  string
		ConstLabels Labels
		Buckets     []float64
	}
)

// Counter only goes up.
type Counter struct {
	d *desc
	v value
}

// NewCounter returns a counter without variable labels.
func NewCounter(o CounterOpts) *Counter {
	d := newDesc(o.Name, o.Help, kindCounter, o.ConstLabels, nil)
	return &Counter{d: &d}
}

// Inc adds one.
func (c *Counter) Inc() { c.v.ints.Add(1) }

// Add adds v, which must not be negative.
func (c *Counter) Add(v float64) {
	if v < 0 {
		panic("prom: counter cannot decrease in value")
	}
	c.v.add(v)
}

// Value is the counter's value.
func (c *Counter) Value() float64 { return c.v.get() }

func (c *Counter) families() []family {
	return []family{{c.d.name, func(b *bytes.Buffer) {
		header(b, c.d.name, c.d.help, kindCounter)
		sample(b, c.d.name, c.d.labelPairs(nil), "", "", floatValue(c.v.get()))
	}}}
}

// Gauge goes up and down.
type Gauge struct {
	d *desc
	v value
}

// NewGauge returns a gauge without variable labels.
func NewGauge(o GaugeOpts) *Gauge {
	d := newDesc(o.Name, o.Help, kindGauge, o.ConstLabels, nil)
	return &Gauge{d: &d}
}

// Set sets the gauge to v.
func (g *Gauge) Set(v float64) { g.v.set(v) }

// Value is the gauge's value.
func (g *Gauge) Value() float64 { return g.v.get() }

func (g *Gauge) families() []family {
	return []family{{g.d.name, func(b *bytes.Buffer) {
		header(b, g.d.name, g.d.help, kindGauge)
		sample(b, g.d.name, g.d.labelPairs(nil), "", "", floatValue(g.v.get()))
	}}}
}

// Observer takes observations (a histogram).
type Observer interface{ Observe(float64) }

// Histogram counts observations in buckets.
type Histogram struct {
	d      *desc
	upper  []float64
	counts []atomic.Uint64 // per bucket, not cumulative; the last is above every bound
	sum    value
}

func newHistogram(d *desc, buckets []float64) *Histogram {
	if !slices.IsSorted(buckets) {
		panic("prom: histogram buckets must be in increasing order")
	}
	upper := slices.Clone(buckets)
	if n := len(upper); n > 0 && math.IsInf(upper[n-1], +1) {
		upper = upper[:n-1]
	}
	return &Histogram{d: d, upper: upper, counts: make([]atomic.Uint64, len(upper)+1)}
}

// NewHistogram returns a histogram without variable labels.
func NewHistogram(o HistogramOpts) *Histogram {
	d := newDesc(o.Name, o.Help, kindHistogram, o.ConstLabels, nil)
	return newHistogram(&d, o.Buckets)
}

// Observe counts v in the first bucket whose bound is at least v.
func (h *Histogram) Observe(v float64) {
	h.counts[sortSearch(h.upper, v)].Add(1)
	h.sum.add(v)
}

func sortSearch(upper []float64, v float64) int {
	i, _ := slices.BinarySearch(upper, v)
	return i
}

func (h *Histogram) writeSeries(b *bytes.Buffer, ps []pair) {
	var cum uint64
	for i, u := range h.upper {
		cum += h.counts[i].Load()
		sample(b, h.d.name+"_bucket", ps, "le", formatFloat(u), uintValue(cum))
	}
	cum += h.counts[len(h.upper)].Load()
	sample(b, h.d.name+"_bucket", ps, "le", "+Inf", uintValue(cum))
	sample(b, h.d.name+"_sum", ps, "", "", floatValue(h.sum.get()))
	sample(b, h.d.name+"_count", ps, "", "", uintValue(cum))
}

func (h *Histogram) families() []family {
	return []family{{h.d.name, func(b *bytes.Buffer) {
		header(b, h.d.name, h.d.help, kindHistogram)
		h.writeSeries(b, h.d.labelPairs(nil))
	}}}
}

// vec holds the series of a family by their label values.
type vec[T any] struct {
	d    desc
	mu   sync.RWMutex
	kids map[string]*child[T]
	make func() T
}

type child[T any] struct {
	vals []string
	m    T
}

func (v *vec[T]) with(vals []string) T {
	if len(vals) != len(v.d.varNames) {
		panic("prom: " + v.d.name + ": want " + strconv.Itoa(len(v.d.varNames)) + " label values, got " + strconv.Itoa(len(vals)))
	}
	key := strings.Join(vals, "\xff")
	v.mu.RLock()
	c := v.kids[key]
	v.mu.RUnlock()
	if c != nil {
		return c.m
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c = v.kids[key]; c == nil {
		c = &child[T]{vals: slices.Clone(vals), m: v.make()}
		v.kids[key] = c
	}
	return c.m
}

// sorted returns the children with their label pairs, in client_golang's order: by the
// label values, the labels sorted by name.
func (v *vec[T]) sorted() ([]*child[T], [][]pair) {
	v.mu.RLock()
	kids := make([]*child[T], 0, len(v.kids))
	for _, c := range v.kids {
		kids = append(kids, c)
	}
	v.mu.RUnlock()
	pairs := make(map[*child[T]][]pair, len(kids))
	for _, c := range kids {
		pairs[c] = v.d.labelPairs(c.vals)
	}
	slices.SortFunc(kids, func(a, b *child[T]) int {
		pa, pb := pairs[a], pairs[b]
		for i := range pa {
			if c := strings.Compare(pa[i].value, pb[i].value); c != 0 {
				return c
			}
		}
		return 0
	})
	ps := make([][]pair, len(kids))
	for i, c := range kids {
		ps[i] = pairs[c]
	}
	return kids, ps
}

// CounterVec is a counter by label values.
type CounterVec struct{ v *vec[*Counter] }

// NewCounterVec returns a counter with variable labels.
func NewCounterVec(o CounterOpts, labels []string) *CounterVec {
	cv := &CounterVec{v: &vec[*Counter]{d: newDesc(o.Name, o.Help, kindCounter, o.ConstLabels, labels), kids: map[string]*child[*Counter]{}}}
	cv.v.make = func() *Counter { return &Counter{d: &cv.v.d} }
	return cv
}

// WithLabelValues returns the counter of these label values, in the labels' order.
func (cv *CounterVec) WithLabelValues(vals ...string) *Counter { return cv.v.with(vals) }

func (cv *CounterVec) families() []family {
	kids, ps := cv.v.sorted()
	if len(kids) == 0 {
		return nil
	}
	d := &cv.v.d
	return []family{{d.name, func(b *bytes.Buffer) {
		header(b, d.name, d.help, kindCounter)
		for i, c := range kids {
			sample(b, d.name, ps[i], "", "", floatValue(c.m.v.get()))
		}
	}}}
}

// HistogramVec is a histogram by label values.
type HistogramVec struct{ v *vec[*Histogram] }

// NewHistogramVec returns a histogram with variable labels.
func NewHistogramVec(o HistogramOpts, labels []string) *HistogramVec {
	hv := &HistogramVec{v: &vec[*Histogram]{d: newDesc(o.Name, o.Help, kindHistogram, o.ConstLabels, labels), kids: map[string]*child[*Histogram]{}}}
	buckets := slices.Clone(o.Buckets)
	newHistogram(&hv.v.d, buckets) // checks the buckets now
	hv.v.make = func() *Histogram { return newHistogram(&hv.v.d, buckets) }
	return hv
}

// WithLabelValues returns the histogram of these label values, in the labels' order.
func (hv *HistogramVec) WithLabelValues(vals ...string) Observer { return hv.v.with(vals) }

func (hv *HistogramVec) families() []family {
	kids, ps := hv.v.sorted()
	if len(kids) == 0 {
		return nil
	}
	d := &hv.v.d
	return []family{{d.name, func(b *bytes.Buffer) {
		header(b, d.name, d.help, kindHistogram)
		for i, c := range kids {
			c.m.writeSeries(b, ps[i])
		}
	}}}
}
