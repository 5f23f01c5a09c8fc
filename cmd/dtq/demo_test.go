package main

import (
	"regexp"
	"strings"
	"testing"
)

// On a machine without redis-server the demo runs on the embedded Redis and ends as it
// does on Redis: every task finished, none lost, the killed worker's task finished by a
// peer, nothing logged at error level by the workers.
func TestDemoWithoutRedisServer(t *testing.T) {
	t.Parallel()
	// PATH holds nothing: no redis-server to find (the demo starts its workers from its
	// own executable, not from PATH).
	env := []string{"PATH=" + t.TempDir(), "DTQ_REDIS_URL=", "DTQ_REDIS_CA_FILE="}
	out, errOut, code := dtq(t, env, "demo", "--tasks", "60")
	if code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"no redis-server on PATH: started an embedded Redis",
		"  tasks       62 in ",
		"  lost        0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^recovered task \S+ finished by demo-worker-\d at attempt \d+,`).MatchString(out) {
		t.Errorf("demo output lacks the recovered task:\n%s", out)
	}
	if strings.Contains(errOut, `"level":"ERROR"`) || strings.Contains(errOut, "cmsgpack") {
		t.Errorf("the workers logged errors:\n%s", errOut)
	}
}
