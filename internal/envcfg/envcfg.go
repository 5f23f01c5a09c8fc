// Package envcfg loads configuration structs from the environment with go-envconfig
// and reports a bad value as an *Error naming the variable, as a one-line message.
package envcfg

import (
	"context"
	"errors"
	"reflect"
	"strings"

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

// Load fills target (a pointer to a struct with env tags) from l.
func Load(ctx context.Context, l envconfig.Lookuper, target any) error {
	err := envconfig.ProcessWith(ctx, &envconfig.Config{Target: target, Lookuper: l})
	if err == nil {
		return nil
	}
	// go-envconfig names the struct field ("Port: strconv.ParseInt: …"); name the
	// variable instead, and keep only the reason.
	msg := err.Error()
	t := reflect.TypeOf(target).Elem()
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
