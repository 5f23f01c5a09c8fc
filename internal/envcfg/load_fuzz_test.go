package envcfg_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/envcfg"
)

type sample struct {
	N int            `env:"X_N, default=1"`
	F float64        `env:"X_F, default=0.5"`
	B bool           `env:"X_B, default=false"`
	D time.Duration  `env:"X_D, default=1s"`
	L []string       `env:"X_L, default=a"`
	U uint16         `env:"X_U, default=7"`
	M map[string]int `env:"X_M"`
}

// Load turns whatever the environment holds into the struct or into one *Error naming
// the variable, on one line, the same as go-envconfig did.
func FuzzLoad(f *testing.F) {
	f.Add("1", "0.5", "true", "1s", "a,b", "7", "k:1")
	f.Add("x", "nan", "maybe", "forever", "", "70000", "k")
	f.Add("9223372036854775808", "1e400", "2", "-1h", ",,,", "-1", "k:v,:")
	f.Add(" 1", "0x10", "T", "1.5h2m", "a\nb", "0", "\x00:\x00")
	f.Fuzz(func(t *testing.T, n, fl, b, d, l, u, m string) {
		env := map[string]string{"X_N": n, "X_F": fl, "X_B": b, "X_D": d, "X_L": l, "X_U": u, "X_M": m}
		same[sample](t, env) // as go-envconfig loads it
		var s sample
		err := envcfg.Load(context.Background(), envconfig.MapLookuper(env), &s)
		if err == nil {
			return
		}
		var e *envcfg.Error
		if !errors.As(err, &e) {
			t.Fatalf("error %T: %v", err, err)
		}
		if strings.ContainsAny(err.Error(), "\n\r") {
			t.Fatalf("error is not one line: %q", err.Error())
		}
		if _, ok := env[e.Var]; !ok && e.Var != "environment" {
			t.Fatalf("error names %q", e.Var)
		}
	})
}
