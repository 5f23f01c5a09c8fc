// Package envcfg loads configuration structs from the environment, by go-envconfig's
// rules and tags, and reports a bad value as an *Error naming the variable, as a one-line message.
//
// A configuration struct describes each variable in its field's tags, and everything
// else derives from them: the loading, the range checks and the --help table. The
// tags:
//
//   - env: the variable and its default (go-envconfig's tag);
//   - help: one line for --help; a range, when there is one, is appended to it;
//   - unit: "s" or "ms" on a time.Duration field: the variable holds seconds
//     (fractions accepted) or whole milliseconds, not a Go duration; on a number,
//     "bytes" or nothing: only shown in --help;
//   - range: "min..max" in the variable's unit, both included; Load and Check refuse a
//     value outside;
//   - shown: the default --help shows when it is not the tag's (one filled in code).
//
// For example:
//
//	Timeout time.Duration `env:"X_TIMEOUT_S, default=30" unit:"s" range:"0..3600" help:"seconds to wait"`
//
// Nothing here runs at package initialisation: the tags are read when a function is
// called.
package envcfg

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Error names the variable a bad value came from.
type Error struct {
	Var string
	Err error
}

func (e *Error) Error() string { return e.Var + ": " + oneLine(e.Err.Error()) }
func (e *Error) Unwrap() error { return e.Err }

// Bad returns an *Error for variable v.
func Bad(v string, err error) error { return &Error{Var: v, Err: err} }

// Option adjusts Load and Check.
type Option func(*options)

type options struct {
	outOfRange func(v float64, f Field) error
}

// OutOfRange words the error of a value outside its range (the variable's name is
// added to it). Without it the error reads "<v> must be within <min>..<max> <unit>".
func OutOfRange(fn func(v float64, f Field) error) Option {
	return func(o *options) { o.outOfRange = fn }
}

func buildOptions(opts []Option) options {
	o := options{outOfRange: func(v float64, f Field) error { return fmt.Errorf("%v must be within %s", v, f.Range()) }}
	for _, fn := range opts {
		fn(&o)
	}
	return o
}

// Load fills target (a pointer to a struct with env tags) from l: a variable not set
// takes its tag's default, a set one its value, even when that is zero or empty. A
// duration with a unit tag is read in that unit and checked against its range here,
// before it becomes a time.Duration; the items of a list are trimmed of spaces.
func Load(ctx context.Context, l Lookuper, target any, opts ...Option) error {
	return process(ctx, l, target, buildOptions(opts))
}

// Defaults sets every zero field of target (a pointer to a struct with env tags) that
// has a default to that default, from no environment at all.
func Defaults(target any) error {
	return process(context.Background(), mapLookuper(nil), target, buildOptions(nil))
}

// Lookuper is where variables come from: envconfig.OsLookuper(), envconfig.MapLookuper
// and OsLookuper satisfy it.
type Lookuper interface {
	Lookup(key string) (string, bool)
}

// OsLookuper looks variables up in the process's environment.
func OsLookuper() Lookuper { return osLookuper{} }

type osLookuper struct{}

func (osLookuper) Lookup(key string) (string, bool) { return os.LookupEnv(key) }

// mapLookuper looks variables up in a map.
type mapLookuper map[string]string

func (m mapLookuper) Lookup(key string) (string, bool) {
	v, ok := m[key]
	return v, ok
}

// process fills target as go-envconfig's ProcessWith did for the tags and types these
// structs use (env:"NAME" and env:"NAME, default=V"; strings, bools, integers,
// floats, durations, lists and maps), with the same results and the same errors, but
// without linking go-envconfig: it imports encoding/gob (for one interface check), and
// gob's initialisation cost every start of the worker more than loading its
// configuration. load_test.go runs both over the same inputs.
func process(_ context.Context, l Lookuper, target any, o options) error {
	v := reflect.ValueOf(target)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		panic("envcfg: target must be a pointer to a struct")
	}
	e := v.Elem()
	t := e.Type()
	for _, f := range fields(t) {
		sf := t.Field(f.index)
		ef := e.Field(f.index)
		if !ef.CanSet() {
			return nameVariable(fmt.Errorf("%s: cannot parse private fields", sf.Name), t)
		}
		if !ef.IsZero() { // a value set beforehand stays (Defaults)
			continue
		}
		val, found := l.Lookup(f.Var)
		if !found {
			if f.def == "" {
				continue
			}
			val = expand(f.def, l)
		}
		if f.duration && val != "" {
			d, err := f.decode(val, o)
			if err != nil {
				return err
			}
			ef.SetInt(int64(d))
			continue
		}
		if err := setField(val, ef); err != nil {
			return nameVariable(fmt.Errorf("%s: %w", sf.Name, err), t)
		}
	}
	trimLists(e)
	return nil
}

// expand resolves $VAR and ${VAR} in a default from l; \$ is a literal $ and \\ a
// backslash.
func expand(def string, l Lookuper) string {
	def = strings.ReplaceAll(def, "\\\\", "\u0000")
	def = strings.ReplaceAll(def, "\\$", "\u0008")
	v := os.Expand(def, func(k string) string {
		s, _ := l.Lookup(k)
		return s
	})
	v = strings.ReplaceAll(v, "\u0000", "\\")
	return strings.ReplaceAll(v, "\u0008", "$")
}

// setField parses v into ef by its kind; an empty v leaves ef as it is.
func setField(v string, ef reflect.Value) error {
	if v == "" {
		return nil
	}
	tf := ef.Type()
	switch tf.Kind() {
	case reflect.Bool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return err
		}
		ef.SetBool(b)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(v, tf.Bits())
		if err != nil {
			return err
		}
		ef.SetFloat(f)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if tf == reflect.TypeFor[time.Duration]() {
			d, err := time.ParseDuration(v)
			if err != nil {
				return err
			}
			ef.SetInt(int64(d))
			return nil
		}
		i, err := strconv.ParseInt(v, 0, tf.Bits())
		if err != nil {
			return err
		}
		ef.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u, err := strconv.ParseUint(v, 0, tf.Bits())
		if err != nil {
			return err
		}
		ef.SetUint(u)
	case reflect.String:
		ef.SetString(v)
	case reflect.Map:
		items := strings.Split(v, ",")
		mp := reflect.MakeMapWithSize(tf, len(items))
		for _, item := range items {
			mk, mv, ok := strings.Cut(item, ":")
			if !ok {
				return fmt.Errorf("%s: invalid map item", item)
			}
			mk, mv = strings.TrimSpace(mk), strings.TrimSpace(mv)
			k := reflect.New(tf.Key()).Elem()
			if err := setField(mk, k); err != nil {
				return fmt.Errorf("%s: %w", mk, err)
			}
			e := reflect.New(tf.Elem()).Elem()
			if err := setField(mv, e); err != nil {
				return fmt.Errorf("%s: %w", mv, err)
			}
			mp.SetMapIndex(k, e)
		}
		ef.Set(mp)
	case reflect.Slice:
		if tf.Elem().Kind() == reflect.Uint8 {
			ef.SetBytes([]byte(v))
			return nil
		}
		items := strings.Split(v, ",")
		sl := reflect.MakeSlice(tf, len(items), len(items))
		for i, item := range items {
			item = strings.TrimSpace(item)
			if err := setField(item, sl.Index(i)); err != nil {
				return fmt.Errorf("%s: %w", item, err)
			}
		}
		ef.Set(sl)
	default:
		panic("envcfg: " + tf.String() + " is not a type a variable can be read into")
	}
	return nil
}

// decode reads v, a number in f's unit, as a duration, within f's range.
func (f Field) decode(v string, o options) (time.Duration, error) {
	var x float64
	switch f.Unit {
	case "s":
		s, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, Bad(f.Var, errors.New(reason(err.Error())))
		}
		x = s
	default: // "ms": whole milliseconds, as an integer variable always took
		n, err := strconv.ParseInt(v, 0, 64)
		if err != nil {
			return 0, Bad(f.Var, errors.New(reason(err.Error())))
		}
		x = float64(n)
	}
	// NaN fails both comparisons: !(in range) catches it, and ±Inf is out of range.
	if f.Bounded && !(x >= f.Min && x <= f.Max) {
		return 0, Bad(f.Var, o.outOfRange(x, f))
	}
	ns := math.Round(x * float64(f.unitSize()))
	if !(ns >= math.MinInt64 && ns < math.MaxInt64) {
		return 0, Bad(f.Var, fmt.Errorf("%v does not fit a duration", x))
	}
	return time.Duration(ns), nil
}

// trimLists trims the spaces around every item of the struct's []string fields.
func trimLists(v reflect.Value) {
	for i := 0; i < v.NumField(); i++ {
		fv := v.Field(i)
		if fv.Kind() != reflect.Slice || fv.Type().Elem().Kind() != reflect.String || !fv.CanSet() {
			continue
		}
		for j := 0; j < fv.Len(); j++ {
			fv.Index(j).SetString(strings.TrimSpace(fv.Index(j).String()))
		}
	}
}

// nameVariable turns go-envconfig's error, which names the struct field ("Port:
// strconv.ParseInt: …"), into an *Error naming the variable, with the reason only.
func nameVariable(err error, t reflect.Type) error {
	var e *Error
	if errors.As(err, &e) { // from the unit decoding: already named
		return e
	}
	msg := err.Error()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		if name == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(msg, f.Name+": "); ok {
			return &Error{Var: name, Err: errors.New(reason(rest))}
		}
		if strings.Contains(msg, `"`+name+`"`) {
			return &Error{Var: name, Err: errors.New(reason(msg))}
		}
	}
	return &Error{Var: "environment", Err: err}
}

// reason turns "strconv.ParseInt: parsing "x": invalid syntax" into
// `"x" is not valid (invalid syntax)`.
func reason(s string) string {
	if i := strings.Index(s, "parsing "); i >= 0 {
		v := s[i+len("parsing "):]
		if j := strings.LastIndex(v, ": "); j >= 0 {
			return v[:j] + " is not a valid value (" + v[j+2:] + ")"
		}
	}
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
