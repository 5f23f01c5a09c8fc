package envcfg

import (
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Var describes one variable for --help: its name, the default shown, and its help,
// which ends with its range when it has one.
type Var struct{ Name, Default, Help string }

// Field is one variable of a configuration struct, as its tags describe it.
type Field struct {
	Var      string  // the variable's name
	Default  string  // the default --help shows
	Help     string  // the help tag, without the range
	Unit     string  // "s", "ms", "bytes" or ""
	Min, Max float64 // the range, in Unit, when Bounded
	Bounded  bool

	index    int
	def      string // the tag's default
	duration bool   // a time.Duration read in Unit
}

// Range is "min..max", followed by the unit ("seconds", "ms", "bytes") if any.
func (f Field) Range() string {
	s := strconv.FormatFloat(f.Min, 'f', -1, 64) + ".." + strconv.FormatFloat(f.Max, 'f', -1, 64)
	switch f.Unit {
	case "s":
		s += " seconds"
	case "":
	default:
		s += " " + f.Unit
	}
	return s
}

// unitSize is the duration one unit of the variable stands for.
func (f Field) unitSize() time.Duration {
	if f.Unit == "ms" {
		return time.Millisecond
	}
	return time.Second
}

// Fields lists the variables of struct type t (or a pointer to one), in field order.
// A malformed tag is a programming error: it panics, and every package's tests read
// their tables.
func Fields(t reflect.Type) []Field { return slices.Clone(fields(t)) }

// tables holds each struct type's fields, read from its tags once: a worker's start
// reads its table for --help, to load and to check, and reading tags is most of the
// cost of loading a configuration.
var tables sync.Map // reflect.Type → []Field

// fields is Fields without the copy: callers must not modify the slice.
func fields(t reflect.Type) []Field {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if f, ok := tables.Load(t); ok {
		return f.([]Field)
	}
	f, _ := tables.LoadOrStore(t, readFields(t))
	return f.([]Field)
}

// readFields reads t's tags.
func readFields(t reflect.Type) []Field {
	var out []Field
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		name, opts, _ := strings.Cut(sf.Tag.Get("env"), ",")
		name = strings.TrimSpace(name)
		if name == "" || name == "-" {
			continue
		}
		f := Field{Var: name, Help: sf.Tag.Get("help"), Unit: sf.Tag.Get("unit"), index: i}
		if o := strings.TrimLeft(opts, " "); o != "" {
			def, ok := strings.CutPrefix(o, "default=")
			if !ok {
				panic("envcfg: " + t.Name() + "." + sf.Name + ": env tag option " + strconv.Quote(o) + " is not default=")
			}
			f.Default, f.def = def, def
		}
		if shown, ok := sf.Tag.Lookup("shown"); ok {
			f.Default = shown
		}
		isDuration := sf.Type == reflect.TypeFor[time.Duration]()
		f.duration = isDuration && (f.Unit == "s" || f.Unit == "ms")
		if isDuration && !f.duration && f.Unit != "" {
			panic("envcfg: " + t.Name() + "." + sf.Name + ": a duration's unit is s or ms, not " + f.Unit)
		}
		if r, ok := sf.Tag.Lookup("range"); ok {
			a, b, ok := strings.Cut(r, "..")
			lo, err1 := strconv.ParseFloat(a, 64)
			hi, err2 := strconv.ParseFloat(b, 64)
			if !ok || err1 != nil || err2 != nil || !(lo <= hi) {
				panic("envcfg: " + t.Name() + "." + sf.Name + ": range " + strconv.Quote(r) + " is not min..max")
			}
			f.Min, f.Max, f.Bounded = lo, hi, true
		}
		out = append(out, f)
	}
	return out
}

// Vars is the --help table of struct type t: every variable, its default, and its
// help ending with "; " and its range when it has one.
func Vars(t reflect.Type) []Var {
	fs := fields(t)
	vars := make([]Var, len(fs))
	for i, f := range fs {
		vars[i] = Var{Name: f.Var, Default: f.Default, Help: f.Help}
		if f.Bounded {
			vars[i].Help += "; " + f.Range()
		}
	}
	return vars
}

// Check returns an *Error for the first field of v (a struct, or a pointer to one)
// outside its range, in field order; a duration is compared in its variable's unit.
// It changes nothing.
func Check(v any, opts ...Option) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	o := buildOptions(opts)
	for _, f := range fields(rv.Type()) {
		if !f.Bounded {
			continue
		}
		fv := rv.Field(f.index)
		var x float64
		switch {
		case f.duration:
			x = float64(fv.Int()) / float64(f.unitSize())
		case fv.CanInt():
			x = float64(fv.Int())
		case fv.CanUint():
			x = float64(fv.Uint())
		case fv.CanFloat():
			x = fv.Float()
		default:
			continue
		}
		if !(x >= f.Min && x <= f.Max) {
			return Bad(f.Var, o.outOfRange(x, f))
		}
	}
	return nil
}

// WriteHelp prints vars as the commands' --help lists them, one variable in two lines:
// the name padded to width and the default in brackets (unset standing for an empty
// one), then the help.
func WriteHelp(w io.Writer, vars []Var, width int, unset string) {
	for _, v := range vars {
		def := v.Default
		if def == "" {
			def = unset
		}
		fmt.Fprintf(w, "  %-*s [%s]\n      %s\n", width, v.Name, def, v.Help)
	}
}
