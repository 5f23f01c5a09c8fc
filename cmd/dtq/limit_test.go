package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/redistest"
)

// limit set, list and remove work, inspect queue shows the limits; bad input exits 2
// with a clear line and stores nothing; removing an unknown limit exits 1.
func TestLimitCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	env := []string{"DTQ_REDIS_URL=" + srv.URL(), "DTQ_KEY_PREFIX=" + redistest.Prefix(t)}
	out, errOut, code := dtq(t, env, "limit", "set", "--queue", "mail", "--rate", "100/s", "--burst", "5")
	var li client.LimitInfo
	if code != 0 || json.Unmarshal([]byte(out), &li) != nil || li.Rate != 100 || li.Burst != 5 || li.Function != "" {
		t.Fatalf("limit set: exit %d out %q err %q", code, out, errOut)
	}
	if out, errOut, code = dtq(t, env, "limit", "set", "--queue", "mail", "--function", "send_email", "--concurrency", "5"); code != 0 {
		t.Fatalf("limit set --function: exit %d out %q err %q", code, out, errOut)
	}
	out, _, code = dtq(t, env, "limit", "list")
	if code != 0 || !strings.Contains(out, "send_email") || !strings.Contains(out, "100/1s") || !strings.Contains(out, "CONCURRENCY") {
		t.Fatalf("limit list: exit %d\n%s", code, out)
	}
	out, _, code = dtq(t, env, "inspect", "queue", "mail")
	if code != 0 || !strings.Contains(out, `"limits"`) || !strings.Contains(out, `"send_email"`) {
		t.Fatalf("inspect queue: exit %d\n%s", code, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"set", "--rate", "1/s"}, "--queue is required"},
		{[]string{"set", "--queue", "mail"}, "a rate or a concurrency"},
		{[]string{"set", "--queue", "mail", "--rate", "0/s"}, "not a count"},
		{[]string{"set", "--queue", "mail", "--rate", "10/d"}, "unknown unit"},
		{[]string{"set", "--queue", "mail", "--rate", "1000000/s"}, "a second"},
		{[]string{"set", "--queue", "mail", "--concurrency", "-1"}, "negative"},
		{[]string{"set", "--queue", "mail", "--burst", "3"}, "a rate or a concurrency"},
		{[]string{"set", "--queue", "a{b}", "--concurrency", "1"}, "queue name"},
		{[]string{"set", "--queue", "mail", "--function", "a b", "--concurrency", "1"}, "function name"},
		{[]string{"remove"}, "--queue is required"},
		{[]string{"frobnicate"}, "unknown subcommand"},
	} {
		_, errOut, code := dtq(t, env, append([]string{"limit"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("limit %v: exit %d, stderr %q; want exit 2 naming %q", c.args, code, errOut, c.want)
		}
	}
	if out, _, _ = dtq(t, env, "limit", "list", "--json"); strings.Count(out, `"queue"`) != 2 {
		t.Errorf("bad sets changed the limits: %s", out)
	}
	if _, errOut, code = dtq(t, env, "limit", "remove", "--queue", "mail", "--function", "nosuch"); code != 1 || !strings.Contains(errOut, "no such limit") {
		t.Errorf("remove of an unknown limit: exit %d, stderr %q", code, errOut)
	}
	if _, _, code = dtq(t, env, "limit", "remove", "--queue", "mail"); code != 0 {
		t.Fatalf("limit remove: exit %d", code)
	}
	if out, _, _ = dtq(t, env, "limit", "list", "--queue", "mail", "--json"); strings.Count(out, `"queue"`) != 1 {
		t.Errorf("after remove: %s", out)
	}
}
