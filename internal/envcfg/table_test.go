package envcfg_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/envcfg"
)

type units struct {
	S     time.Duration `env:"X_S, default=30" unit:"s" range:"0.05..86400" help:"seconds"`
	Block time.Duration `env:"X_MS, default=1000" unit:"ms" range:"0..60000" help:"milliseconds"`
	Free  time.Duration `env:"X_FREE, default=2" unit:"s" help:"unbounded seconds"`
	Plain time.Duration `env:"X_PLAIN, default=1m" help:"a Go duration"`
	N     int           `env:"X_N, default=16" range:"1..100" help:"a count"`
	Bytes int           `env:"X_BYTES, default=1024" unit:"bytes" range:"1..2048" help:"a size"`
	ID    string        `env:"X_ID" shown:"id-<hex>" help:"an id filled in code"`
	List  []string      `env:"X_LIST, default=a" help:"names"`
	On    bool          `env:"X_ON, default=false" help:"a switch"`
}

func load(env map[string]string, opts ...envcfg.Option) (units, error) {
	var u units
	err := envcfg.Load(context.Background(), envconfig.MapLookuper(env), &u, opts...)
	return u, err
}

// A duration with a unit is read as a number of that unit: seconds with fractions,
// milliseconds whole (as an integer variable always was, 0x prefix included).
func TestDurationUnits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, value string
		want        time.Duration
	}{
		{"X_S", "30", 30 * time.Second},
		{"X_S", "0.05", 50 * time.Millisecond},
		{"X_S", "1.5", 1500 * time.Millisecond},
		{"X_S", "1e3", 1000 * time.Second},
		{"X_S", "86400", 24 * time.Hour},
		{"X_S", "", 0}, // set and empty: zero, as any variable set empty
		{"X_MS", "30000", 30 * time.Second},
		{"X_MS", "0", 0},
		{"X_MS", "0x10", 16 * time.Millisecond},
		{"X_FREE", "0.000000001", time.Nanosecond},
		{"X_FREE", "0.0000000004", 0},
		{"X_PLAIN", "1h30m", 90 * time.Minute},
	} {
		u, err := load(map[string]string{c.name: c.value})
		if err != nil {
			t.Errorf("%s=%q: %v", c.name, c.value, err)
			continue
		}
		var got time.Duration
		switch c.name {
		case "X_S":
			got = u.S
		case "X_MS":
			got = u.Block
		case "X_FREE":
			got = u.Free
		case "X_PLAIN":
			got = u.Plain
		}
		if got != c.want {
			t.Errorf("%s=%q: %v, want %v", c.name, c.value, got, c.want)
		}
	}
	u, err := load(nil)
	if err != nil || u.S != 30*time.Second || u.Block != time.Second || u.Free != 2*time.Second || u.Plain != time.Minute {
		t.Errorf("defaults: %+v, %v", u, err)
	}
}

// A bad duration is one line naming its variable: not a number of the unit (a Go
// duration included), a fraction of milliseconds, outside the range, NaN, ±Inf, too
// large for a duration.
func TestDurationUnitsRefuse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, value, want string }{
		{"X_S", "soon", `"soon" is not a valid value (invalid syntax)`},
		{"X_S", "30s", `"30s" is not a valid value (invalid syntax)`},
		{"X_S", "1e400", `"1e400" is not a valid value (value out of range)`},
		{"X_S", "0.0499", "0.0499 must be within 0.05..86400 seconds"},
		{"X_S", "86400.001", "86400.001 must be within 0.05..86400 seconds"},
		{"X_S", "-1", "-1 must be within 0.05..86400 seconds"},
		{"X_S", "NaN", "NaN must be within 0.05..86400 seconds"},
		{"X_S", "Inf", "+Inf must be within 0.05..86400 seconds"},
		{"X_S", "1e19", "1e+19 must be within 0.05..86400 seconds"},
		{"X_MS", "1.5", `"1.5" is not a valid value (invalid syntax)`},
		{"X_MS", "1e3", `"1e3" is not a valid value (invalid syntax)`},
		{"X_MS", "60001", "60001 must be within 0..60000 ms"},
		{"X_MS", "9223372036854775808", `"9223372036854775808" is not a valid value (value out of range)`},
		{"X_FREE", "1e10", "1e+10 does not fit a duration"},
		{"X_FREE", "-Inf", "-Inf does not fit a duration"},
		{"X_FREE", "NaN", "NaN does not fit a duration"},
	} {
		_, err := load(map[string]string{c.name: c.value})
		var e *envcfg.Error
		if !errors.As(err, &e) || e.Var != c.name || err.Error() != c.name+": "+c.want {
			t.Errorf("%s=%q: err = %v, want %s: %s", c.name, c.value, err, c.name, c.want)
		}
	}
}

// OutOfRange words the range errors of Load and Check alike.
func TestOutOfRangeWording(t *testing.T) {
	t.Parallel()
	word := envcfg.OutOfRange(func(v float64, f envcfg.Field) error {
		return fmt.Errorf("%v outside [%v, %v] (%s)", v, f.Min, f.Max, f.Unit)
	})
	if _, err := load(map[string]string{"X_MS": "70000"}, word); err == nil || err.Error() != "X_MS: 70000 outside [0, 60000] (ms)" {
		t.Errorf("Load: %v", err)
	}
	u, _ := load(nil)
	u.N = 0
	if err := envcfg.Check(u, word); err == nil || err.Error() != "X_N: 0 outside [1, 100] ()" {
		t.Errorf("Check: %v", err)
	}
}

// Check compares every bounded field in its variable's unit, in field order, and
// changes nothing.
func TestCheck(t *testing.T) {
	t.Parallel()
	u, err := load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := envcfg.Check(u); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, c := range []struct {
		set  func(*units)
		want string
	}{
		{func(u *units) { u.S = 49 * time.Millisecond }, "X_S: 0.049 must be within 0.05..86400 seconds"},
		{func(u *units) { u.S = 50 * time.Millisecond; u.Block = time.Minute + time.Millisecond }, "X_MS: 60001 must be within 0..60000 ms"},
		{func(u *units) { u.N = 101 }, "X_N: 101 must be within 1..100"},
		{func(u *units) { u.Bytes = 0 }, "X_BYTES: 0 must be within 1..2048 bytes"},
		{func(u *units) { u.S = 0; u.N = 0 }, "X_S: 0 must be within 0.05..86400 seconds"}, // the first in field order
		{func(u *units) { u.S = 24 * time.Hour; u.Block = time.Minute; u.N = 100; u.Bytes = 1 }, ""},
	} {
		v := u
		c.set(&v)
		before := v
		err := envcfg.Check(&v)
		if got := fmt.Sprint(err); (c.want == "" && err != nil) || (c.want != "" && got != c.want) {
			t.Errorf("Check = %v, want %q", err, c.want)
		}
		if !reflect.DeepEqual(v, before) {
			t.Errorf("Check changed %+v into %+v", before, v)
		}
	}
}

// Defaults fills the zero fields, and only them.
func TestDefaults(t *testing.T) {
	t.Parallel()
	u := units{S: time.Second, N: 3, List: []string{"x"}}
	if err := envcfg.Defaults(&u); err != nil {
		t.Fatal(err)
	}
	want := units{S: time.Second, Block: time.Second, Free: 2 * time.Second, Plain: time.Minute, N: 3, Bytes: 1024, List: []string{"x"}}
	if !reflect.DeepEqual(u, want) {
		t.Errorf("Defaults: %+v, want %+v", u, want)
	}
	var d units
	if err := envcfg.Defaults(&d); err != nil {
		t.Fatal(err)
	}
	l, err := load(nil)
	if err != nil || !reflect.DeepEqual(d, l) {
		t.Errorf("Defaults of a zero struct %+v != Load of no environment %+v (%v)", d, l, err)
	}
}

// The items of a list are trimmed of spaces by the loader.
func TestListsTrimmed(t *testing.T) {
	t.Parallel()
	u, err := load(map[string]string{"X_LIST": " a , b,c "})
	if err != nil || !reflect.DeepEqual(u.List, []string{"a", "b", "c"}) {
		t.Errorf("X_LIST: %q, %v", u.List, err)
	}
}

// Vars is the tags, in field order: a range, with its unit, ends the help; "shown"
// replaces the default shown.
func TestVars(t *testing.T) {
	t.Parallel()
	want := []envcfg.Var{
		{Name: "X_S", Default: "30", Help: "seconds; 0.05..86400 seconds"},
		{Name: "X_MS", Default: "1000", Help: "milliseconds; 0..60000 ms"},
		{Name: "X_FREE", Default: "2", Help: "unbounded seconds"},
		{Name: "X_PLAIN", Default: "1m", Help: "a Go duration"},
		{Name: "X_N", Default: "16", Help: "a count; 1..100"},
		{Name: "X_BYTES", Default: "1024", Help: "a size; 1..2048 bytes"},
		{Name: "X_ID", Default: "id-<hex>", Help: "an id filled in code"},
		{Name: "X_LIST", Default: "a", Help: "names"},
		{Name: "X_ON", Default: "false", Help: "a switch"},
	}
	if got := envcfg.Vars(reflect.TypeFor[units]()); !reflect.DeepEqual(got, want) {
		t.Errorf("Vars:\n got %+v\nwant %+v", got, want)
	}
	if got := envcfg.Vars(reflect.TypeFor[*units]()); !reflect.DeepEqual(got, want) {
		t.Errorf("Vars of a pointer type: %+v", got)
	}
}

// A type's table is read once and shared inside the package; Fields hands out a copy,
// so a caller changing it changes nothing for the loader, the checker or --help.
func TestFieldsIsACopy(t *testing.T) {
	t.Parallel()
	f := envcfg.Fields(reflect.TypeFor[units]())
	f[0].Var, f[0].Min, f[0].Max = "CHANGED", 1, 1
	if g := envcfg.Fields(reflect.TypeFor[*units]()); g[0].Var != "X_S" || g[0].Max != 86400 {
		t.Fatalf("a caller's change reached the shared table: %+v", g[0])
	}
	if u, err := load(map[string]string{"X_S": "2"}); err != nil || u.S != 2*time.Second {
		t.Fatalf("load after a caller's change: %v %v", u.S, err)
	}
	if err := envcfg.Check(units{S: 100 * time.Second, N: 1, Bytes: 1}); err != nil {
		t.Fatalf("check after a caller's change: %v", err)
	}
}

// A malformed range or unit tag is a programming error, found by any test reading
// the table.
func TestFieldsPanicsOnBadTags(t *testing.T) {
	t.Parallel()
	for _, typ := range []reflect.Type{
		reflect.TypeFor[struct {
			A int `env:"A" range:"1-2"`
		}](),
		reflect.TypeFor[struct {
			A int `env:"A" range:"2..1"`
		}](),
		reflect.TypeFor[struct {
			A time.Duration `env:"A" unit:"h"`
		}](),
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%v: no panic", typ)
				}
			}()
			envcfg.Fields(typ)
		}()
	}
}

func TestTableMismatches(t *testing.T) {
	t.Parallel()
	vars := []envcfg.Var{{Name: "A", Help: "a; 0..10 ms"}, {Name: "B", Help: "b"}, {Name: "C", Help: "c; 1..2"}, {Name: "D", Help: "d; 0..9 (0 = off)"}}
	md := "| `A` | `1` | 0..10 | a |\n| `B`, `C` | | 3..4 | b, c |\n| `D` | `0` | d (0..9; 0 = off) |\n"
	got := envcfg.TableMismatches(md, vars)
	if len(got) != 1 || !strings.Contains(got[0], "C lacks its range 1..2") {
		t.Errorf("TableMismatches = %q", got)
	}
	if got := envcfg.TableMismatches("", vars[:1]); len(got) != 1 || got[0] != "no row for A" {
		t.Errorf("TableMismatches of nothing = %q", got)
	}
}

// FuzzDurationUnit: whatever a unit variable holds, Load gives a duration within the
// range, the value's seconds rounded to the nanosecond, or one line naming the
// variable.
func FuzzDurationUnit(f *testing.F) {
	for _, s := range []string{"30", "0.05", "1e3", "", "NaN", "-0", "0x1p-2", "86400.0000000001", "1_0", " 1", "1e-400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		u, err := load(map[string]string{"X_S": v})
		if err != nil {
			var e *envcfg.Error
			if !errors.As(err, &e) || e.Var != "X_S" || strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("X_S=%q: %T %v", v, err, err)
			}
			return
		}
		if v == "" {
			if u.S != 0 {
				t.Fatalf("empty: %v", u.S)
			}
			return
		}
		x, perr := strconv.ParseFloat(v, 64)
		if perr != nil || !(x >= 0.05 && x <= 86400) {
			t.Fatalf("X_S=%q accepted as %v", v, u.S)
		}
		if want := time.Duration(math.Round(x * 1e9)); u.S != want {
			t.Fatalf("X_S=%q: %v, want %v", v, u.S, want)
		}
	})
}
