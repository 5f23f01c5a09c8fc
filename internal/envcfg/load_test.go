package envcfg_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/envcfg"
	"github.com/dtq/dtq/observer"
	"github.com/dtq/dtq/runtime"
	"github.com/dtq/dtq/scaler"
)

// values are what a variable may hold: valid and invalid numbers, durations, lists
// and maps, spaces, and nothing at all.
var values = []string{"", " ", "0", "1", "-1", "7", " 5 ", "1.5", "0x10", "0o17", "1e3", "1e400", "nan", "inf",
	"9223372036854775808", "70000", "x", "true", "false", "T", "maybe", "1s", "10ms", "-1h", "forever", "1.5h2m",
	"a,b", " a , b ", ",,", "a\nb", "k:1", "k:1,j:2", "k", "k:v", ":", "k:1,", "\x00:\x00", "$HOME", "3600", "86401"}

// same loads env into a new T with both loaders and wants the same struct or the
// same error.
func same[T any](t *testing.T, env map[string]string) {
	t.Helper()
	var got, want T
	errGot := envcfg.Load(context.Background(), envconfig.MapLookuper(env), &got)
	errWant := envcfg.LegacyLoad(context.Background(), envconfig.MapLookuper(env), &want)
	if fmt.Sprint(errGot) != fmt.Sprint(errWant) {
		t.Fatalf("%v: error %q, go-envconfig's %q", env, errGot, errWant)
	}
	if errGot == nil && fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) { // not DeepEqual: NaN
		t.Fatalf("%v:\n got %+v\nwant %+v", env, got, want)
	}
}

// eachVariable sets each variable of T to each value in turn, the others unset (their
// defaults), and compares the loaders.
func eachVariable[T any](t *testing.T) {
	t.Helper()
	same[T](t, nil)
	for _, f := range envcfg.Fields(reflect.TypeFor[T]()) {
		for _, v := range values {
			same[T](t, map[string]string{f.Var: v})
		}
	}
}

// Load reads every configuration of dtq as go-envconfig did: the same values, the
// same defaults, the same one-line errors naming the variable.
func TestLoadMatchesGoEnvconfig(t *testing.T) {
	eachVariable[runtime.Config](t)
	eachVariable[scaler.Config](t)
	eachVariable[observer.Config](t)
	eachVariable[sample](t)
	eachVariable[withDefaults](t)
}

type withDefaults struct {
	Ref    string   `env:"X_REF, default=$X_OTHER-${X_OTHER}"`
	Esc    string   `env:"X_ESC, default=\\$X_OTHER\\\\"`
	Other  string   `env:"X_OTHER"`
	List   []string `env:"X_LIST, default= a, b ,c"`
	Spaced int      `env:"X_SPACED,default=3"`
	skip   int
}

// A default naming another variable takes its value, as go-envconfig expands it.
func TestLoadExpandsDefaults(t *testing.T) {
	same[withDefaults](t, map[string]string{"X_OTHER": "o"})
	var w withDefaults
	if err := envcfg.Load(context.Background(), envconfig.MapLookuper(map[string]string{"X_OTHER": "o"}), &w); err != nil {
		t.Fatal(err)
	}
	if w.Ref != "o-o" || w.Esc != `$X_OTHER\` || len(w.List) != 3 || w.List[1] != "b" || w.Spaced != 3 || w.skip != 0 {
		t.Fatalf("%+v", w)
	}
}

// Defaults keeps what is set and fills in the rest, as before.
func TestDefaultsKeepsSetFields(t *testing.T) {
	w := withDefaults{Spaced: 9}
	if err := envcfg.Defaults(&w); err != nil {
		t.Fatal(err)
	}
	if w.Spaced != 9 || len(w.List) != 3 || w.Ref != "-" {
		t.Fatalf("%+v", w)
	}
}
