package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/scaler"
)

func TestHelpListsEveryVariable(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := scalerMain([]string{"--help"}, envconfig.MapLookuper(nil), &out, &errb); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, v := range scaler.EnvVars() {
		if !strings.Contains(out.String(), v.Name) {
			t.Errorf("--help lacks %s", v.Name)
		}
	}
}

func TestBadEnvExits2WithOneLine(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	code := scalerMain(nil, envconfig.MapLookuper(map[string]string{"DTQ_SCALER_ADDR": "not an address"}), &out, &errb)
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], "DTQ_SCALER_ADDR") {
		t.Fatalf("exit %d, stderr %q; want 2 and one line naming DTQ_SCALER_ADDR", code, errb.String())
	}
	if code := scalerMain([]string{"--bogus"}, envconfig.MapLookuper(nil), &out, &errb); code != 2 {
		t.Fatalf("unknown flag exit %d, want 2", code)
	}
}
