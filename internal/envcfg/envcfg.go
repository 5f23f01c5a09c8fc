// Package envcfg loads configuration structs from the environment with go-envconfig
// and reports a bad value as an *Error naming the variable, as a one-line message.
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
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/sethvargo/go-envconfig"
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
func Load(ctx context.Context, l envconfig.Lookuper, target any, opts ...Option) error {
	return process(ctx, l, target, buildOptions(opts))
}

// Defaults sets every zero field of target (a pointer to a struct with env tags) that
// has a default to that default, from no environment at all.
func Defaults(target any) error {
	return process(context.Background(), envconfig.MapLookuper(nil), target, buildOptions(nil))
}

func process(ctx context.Context, l envconfig.Lookuper, target any, o options) error {
	t := reflect.TypeOf(target).Elem()
	fields := Fields(t)
	byName := make(map[string]Field, len(fields))
	for _, f := range fields {
		byName[f.Var] = f
	}
	unitMutator := envconfig.MutatorFunc(func(_ context.Context, key, _, _, v string) (string, bool, error) {
		f, ok := byName[key]
		if !ok || !f.duration || v == "" {
			return v, false, nil
		}
		d, err := f.decode(v, o)
		if err != nil {
			return "", true, err
		}
		return strconv.FormatInt(int64(d), 10) + "ns", true, nil
	})
	err := envconfig.ProcessWith(ctx, &envconfig.Config{Target: target, Lookuper: l, Mutators: []envconfig.Mutator{unitMutator}})
	if err != nil {
		return nameVariable(err, t)
	}
	trimLists(reflect.ValueOf(target).Elem())
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
