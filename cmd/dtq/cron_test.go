package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/redistest"
)

// cron add, list, pause, resume and remove work; bad input exits 2 with a clear line and
// stores nothing; an unknown entry exits 1.
func TestCronCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	env := []string{"DTQ_REDIS_URL=" + srv.URL(), "DTQ_KEY_PREFIX=" + redistest.Prefix(t)}
	out, errOut, code := dtq(t, env, "cron", "add", "--name", "nightly", "--spec", "CRON_TZ=Europe/Paris 30 2 * * *",
		"--queue", "reports", "--function", "build", "--payload", `{"full":true}`, "--priority", "3", "--missed", "skip")
	var ci client.CronInfo
	if code != 0 || json.Unmarshal([]byte(out), &ci) != nil || ci.Name != "nightly" || ci.Missed != client.MissedSkip || ci.NextMS == 0 || ci.Priority != 3 {
		t.Fatalf("cron add: exit %d out %q err %q", code, out, errOut)
	}
	out, _, code = dtq(t, env, "cron", "list")
	if code != 0 || !strings.Contains(out, "nightly") || !strings.Contains(out, "active") || !strings.Contains(out, "NEXT") {
		t.Fatalf("cron list: exit %d\n%s", code, out)
	}
	if _, _, code = dtq(t, env, "cron", "pause", "nightly"); code != 0 {
		t.Fatalf("cron pause: exit %d", code)
	}
	out, _, _ = dtq(t, env, "cron", "list", "--json")
	var ls []client.CronInfo
	if json.Unmarshal([]byte(out), &ls) != nil || len(ls) != 1 || !ls[0].Paused || ls[0].NextMS != 0 {
		t.Fatalf("cron list --json after pause: %s", out)
	}
	if _, _, code = dtq(t, env, "cron", "resume", "nightly"); code != 0 {
		t.Fatalf("cron resume: exit %d", code)
	}
	if out, _, _ = dtq(t, env, "cron", "list"); !strings.Contains(out, "active") {
		t.Fatalf("cron list after resume:\n%s", out)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "--name", "x", "--spec", "99 * * * *", "--function", "f"}, "cron spec"},
		{[]string{"add", "--name", "x", "--spec", "@every 1s", "--function", "f", "--missed", "sometimes"}, "missed policy"},
		{[]string{"add", "--name", "bad name", "--spec", "@every 1s", "--function", "f"}, "cron entry name"},
		{[]string{"add", "--spec", "@every 1s", "--function", "f"}, "--name is required"},
		{[]string{"add", "--name", "x", "--function", "f"}, "--spec is required"},
		{[]string{"add", "--name", "x", "--spec", "@every 1s", "--function", "f", "--queue", "a{b}"}, "queue name"},
		{[]string{"pause"}, "want one entry name"},
		{[]string{"remove", "a b"}, "cron entry name"},
		{[]string{"frobnicate"}, "unknown subcommand"},
	} {
		_, errOut, code := dtq(t, env, append([]string{"cron"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("cron %v: exit %d, stderr %q; want exit 2 naming %q", c.args, code, errOut, c.want)
		}
	}
	for _, sub := range []string{"remove", "pause", "resume"} {
		_, errOut, code := dtq(t, env, "cron", sub, "nosuch")
		if code != 1 || !strings.Contains(errOut, "no such cron entry") {
			t.Errorf("cron %s of an unknown entry: exit %d, stderr %q", sub, code, errOut)
		}
	}
	if out, _, _ = dtq(t, env, "cron", "list", "--json"); !strings.Contains(out, `"nightly"`) || strings.Contains(out, `"x"`) {
		t.Errorf("bad adds changed the entries: %s", out)
	}
	if _, _, code = dtq(t, env, "cron", "remove", "nightly"); code != 0 {
		t.Fatalf("cron remove: exit %d", code)
	}
	if out, _, _ = dtq(t, env, "cron", "list", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("after remove: %s", out)
	}
}
