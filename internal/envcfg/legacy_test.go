package envcfg

import (
	"context"
	"reflect"
	"strconv"

	"github.com/sethvargo/go-envconfig"
)

// LegacyLoad is Load as it was, over go-envconfig's ProcessWith: the reference the
// loader is compared with.
func LegacyLoad(ctx context.Context, l Lookuper, target any) error {
	return legacyProcess(ctx, l, target, buildOptions(nil))
}

func legacyProcess(ctx context.Context, l envconfig.Lookuper, target any, o options) error {
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
