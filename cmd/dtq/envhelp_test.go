package main

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/envcfg"
	"github.com/dtq/dtq/runtime"
)

// The environment list --help prints is the table derived from the configuration's
// tags, whole and in order: the worker's for dtq worker, the client commands' for them.
func TestHelpPrintsTheDerivedTable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		vars []runtime.EnvVar
	}{
		{[]string{"worker", "--help"}, runtime.EnvVars()},
		{[]string{"enqueue", "--help"}, clientEnv()},
		{[]string{"inspect", "--help"}, clientEnv()},
		{[]string{"workers", "--help"}, clientEnv()},
	} {
		out, _, code := dtq(t, nil, c.args...)
		var want bytes.Buffer
		want.WriteString("\nenvironment (default in brackets):\n")
		envcfg.WriteHelp(&want, c.vars, helpWidth, "")
		if code != 0 || !strings.HasSuffix(out, want.String()) {
			t.Errorf("dtq %s: exit %d; its environment list is not the table:\n%s\nwant it to end with:\n%s", strings.Join(c.args, " "), code, out, want.String())
		}
	}
}

// A variable the client commands share with the worker has the worker's default, but
// for DTQ_LOG_LEVEL (a command's failure is its error line); DTQ_MAX_PAYLOAD_BYTES's
// is the client package's.
func TestClientEnvDefaults(t *testing.T) {
	t.Parallel()
	worker := map[string]string{}
	for _, v := range runtime.EnvVars() {
		worker[v.Name] = v.Default
	}
	var names []string
	for _, v := range clientEnv() {
		names = append(names, v.Name)
		def, ok := worker[v.Name]
		switch {
		case !ok:
			t.Errorf("%s is no variable of the worker", v.Name)
		case v.Name == "DTQ_LOG_LEVEL":
			if v.Default != "error" {
				t.Errorf("DTQ_LOG_LEVEL: default %q, want error", v.Default)
			}
		case v.Default != def:
			t.Errorf("%s: default %q, the worker's %q", v.Name, v.Default, def)
		}
		if v.Help == "" {
			t.Errorf("%s has no help", v.Name)
		}
	}
	if want := []string{"DTQ_REDIS_URL", "DTQ_REDIS_CA_FILE", "DTQ_KEY_PREFIX", "DTQ_MAX_PAYLOAD_BYTES", "DTQ_LOG_FORMAT", "DTQ_LOG_LEVEL"}; !reflect.DeepEqual(names, want) {
		t.Errorf("client variables %q, want %q", names, want)
	}
	if worker["DTQ_MAX_PAYLOAD_BYTES"] != strconv.Itoa(client.DefaultMaxPayload) {
		t.Errorf("DTQ_MAX_PAYLOAD_BYTES default %s, client.DefaultMaxPayload %d", worker["DTQ_MAX_PAYLOAD_BYTES"], client.DefaultMaxPayload)
	}
}

// clientVar reads the environment, else the table's default.
func TestClientVar(t *testing.T) {
	t.Setenv("DTQ_KEY_PREFIX", "")
	t.Setenv("DTQ_LOG_FORMAT", "json")
	if got := clientVar("DTQ_KEY_PREFIX"); got != "dtq" {
		t.Errorf("DTQ_KEY_PREFIX empty: %q, want the default dtq", got)
	}
	if got := clientVar("DTQ_LOG_FORMAT"); got != "json" {
		t.Errorf("DTQ_LOG_FORMAT=json: %q", got)
	}
}
