package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/envcfg"
)

// The environment list --help prints is the table derived from the tags, whole and in
// order: scaler.Config's, then this command's own; scaler/README.md lists them all.
func TestHelpPrintsTheDerivedTable(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := scalerMain([]string{"--help"}, envconfig.MapLookuper(nil), &out, &errb); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	var want bytes.Buffer
	envcfg.WriteHelp(&want, envVars(), helpWidth, "unset")
	if !strings.HasSuffix(out.String(), "\nenvironment (default in brackets):\n"+want.String()) {
		t.Errorf("--help's environment list is not the table:\n%s\nwant it to end with:\n%s", out.String(), want.String())
	}
	readme, err := os.ReadFile("../../scaler/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range envcfg.TableMismatches(string(readme), envVars()) {
		t.Errorf("scaler/README.md: %s", m)
	}
}

// DTQ_REDIS_FATAL_AFTER_S is seconds, fractions accepted, within 0..3600.
func TestOwnConfig(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]time.Duration{"": 0, "0.2": 200 * time.Millisecond, "3600": time.Hour} {
		env := map[string]string{"DTQ_REDIS_FATAL_AFTER_S": v}
		var c ownConfig
		if err := c.load(context.Background(), envconfig.MapLookuper(env)); err != nil || c.fatalAfter() != want {
			t.Errorf("%q: %v, %v; want %v", v, c.fatalAfter(), err, want)
		}
	}
	var c ownConfig
	if err := c.load(context.Background(), envconfig.MapLookuper(nil)); err != nil || c.fatalAfter() != 10*time.Second {
		t.Errorf("unset: %v, %v; want 10s", c.fatalAfter(), err)
	}
	for _, v := range []string{"-1", "3600.5", "NaN", "10s"} {
		var c ownConfig
		err := c.load(context.Background(), envconfig.MapLookuper(map[string]string{"DTQ_REDIS_FATAL_AFTER_S": v}))
		if err == nil || !strings.HasPrefix(err.Error(), "DTQ_REDIS_FATAL_AFTER_S: ") {
			t.Errorf("%q: err = %v", v, err)
		}
	}
}
