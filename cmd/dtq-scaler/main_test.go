package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/redistest"
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

// A Redis that refuses the scaler in a way no wait heals (here a wrong password, a
// database number out of range) makes it exit 3 after DTQ_REDIS_FATAL_AFTER_S, with one
// error line naming the cause and never the password.
func TestRedisRefusalExits3(t *testing.T) {
	t.Parallel()
	pw := "pw-" + strings.Repeat("s3cret", 3)
	srv := redistest.Start(t, redistest.Options{Args: []string{"--requirepass", pw}})
	for _, c := range []struct{ url, cause string }{
		{"redis://:wrong" + pw + "@" + srv.Addr() + "/0", "authentication failed"},
		{"redis://:" + pw + "@" + srv.Addr() + "/16", "database number"},
	} {
		var out, errb bytes.Buffer
		code := scalerMain(nil, envconfig.MapLookuper(map[string]string{
			"DTQ_REDIS_URL": c.url, "DTQ_REDIS_FATAL_AFTER_S": "0.2", "DTQ_SCALER_ADDR": "127.0.0.1:0",
			"PORT": "0", "DTQ_LOG_FORMAT": "json",
		}), &out, &errb)
		log := errb.String()
		if code != 3 || strings.Contains(log, pw) {
			t.Fatalf("%s: exit %d, want 3 (and no password):\n%s", c.url, code, log)
		}
		var errs int
		for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("log line is not JSON: %q", line)
			}
			if m["msg"] == "scaler: started" {
				t.Fatalf("the scaler said it started:\n%s", log)
			}
			if m["level"] == "ERROR" {
				errs++
				cause, _ := m["cause"].(string)
				if !strings.Contains(cause, c.cause) || m["exit_code"] != 3.0 {
					t.Errorf("error line %v: want the exit line naming %q", m, c.cause)
				}
			}
		}
		if errs != 1 {
			t.Fatalf("%d error lines, want 1:\n%s", errs, log)
		}
	}
}

// DTQ_REDIS_FATAL_AFTER_S is bounded like every other number, and --help states it.
func TestFatalAfterIsBounded(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"-1", "3600.5", "NaN", "Inf", "soon"} {
		var out, errb bytes.Buffer
		code := scalerMain(nil, envconfig.MapLookuper(map[string]string{"DTQ_REDIS_FATAL_AFTER_S": v}), &out, &errb)
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], "DTQ_REDIS_FATAL_AFTER_S") {
			t.Errorf("DTQ_REDIS_FATAL_AFTER_S=%s: exit %d, stderr %q; want 2 and one line naming it", v, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := scalerMain([]string{"--help"}, envconfig.MapLookuper(nil), &out, &errb); code != 0 || !strings.Contains(out.String(), "DTQ_REDIS_FATAL_AFTER_S") || !strings.Contains(out.String(), "0..3600") {
		t.Fatalf("--help lacks DTQ_REDIS_FATAL_AFTER_S and its range:\n%s", out.String())
	}
}
