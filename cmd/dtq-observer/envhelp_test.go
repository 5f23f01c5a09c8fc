package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/envcfg"
	"github.com/dtq/dtq/observer"
)

// The environment list --help prints is the table derived from observer.Config's
// tags, whole and in order.
func TestHelpPrintsTheDerivedTable(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, envconfig.MapLookuper(nil), &out, &errb, nil); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	var want bytes.Buffer
	envcfg.WriteHelp(&want, observer.EnvVars(), helpWidth, "unset")
	if !strings.HasSuffix(out.String(), "\nenvironment (default in brackets):\n"+want.String()) {
		t.Errorf("--help's environment list is not the table:\n%s\nwant it to end with:\n%s", out.String(), want.String())
	}
}
