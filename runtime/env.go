package runtime

import (
	"context"
	"reflect"

	"github.com/dtq/dtq/internal/envcfg"
)

// The environment's side of Config: a program that builds its Config in Go (with
// WithDefaults) needs nothing of this file.

// EnvVar describes one variable for --help.
type EnvVar = envcfg.Var

// EnvVars lists every variable the worker reads, with its default; the help of a
// numeric one ends with its accepted range. It is derived from Config's tags.
func EnvVars() []EnvVar { return envcfg.Vars(reflect.TypeFor[Config]()) }

// Lookuper is where LoadConfig reads variables: go-envconfig's OsLookuper and
// MapLookuper satisfy it, and so does OsLookuper here.
type Lookuper = envcfg.Lookuper

// OsLookuper reads the process's environment.
func OsLookuper() Lookuper { return envcfg.OsLookuper() }

// LoadConfig reads the configuration from l (OsLookuper in production,
// envconfig.MapLookuper in tests): a variable not set takes its default, a set one its
// value (0 included: DTQ_RESULT_TTL_S=0 keeps records forever); the worker id is filled
// in when unset; then it validates the result.
func LoadConfig(ctx context.Context, l Lookuper) (Config, error) {
	var c Config
	if err := envcfg.Load(ctx, l, &c); err != nil {
		return c, err
	}
	c = c.withWorkerID()
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}
