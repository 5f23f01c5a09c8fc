package observer_test

import (
	"context"
	"testing"

	"github.com/dtq/dtq/client"
)

func (e *env) cron(name string) *client.CronInfo {
	e.t.Helper()
	ci, err := e.c.Cron(context.Background(), name)
	if err != nil {
		e.t.Fatalf("cron %s: %v", name, err)
	}
	return ci
}

// The periodic entries page lists the entries created through the client, pauses and
// resumes one with its button (refused without the token), and shows markup in an
// entry (a payload, and a definition written by hand under a hostile name) as text.
func TestUICronEntries(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	const payload = `<img src=x onerror=alert(1)>`
	for _, ce := range []client.CronEntry{
		{Name: "sweep", Spec: "@every 30s", Queue: "default", Function: "noop"},
		{Name: "nightly", Spec: "CRON_TZ=Europe/Paris 30 2 * * *", Queue: "reports", Function: "echo",
			Payload: payload, Priority: 7, Missed: client.MissedSkip},
	} {
		if _, err := e.c.AddCron(ctx, ce); err != nil {
			t.Fatal(err)
		}
	}
	// Someone else's write: a name no AddCron accepts, a definition that is not JSON.
	evil := `<img src=x onerror=alert(2)>`
	if err := e.rdb.HSet(ctx, e.ks.Cron(), evil, `<script>alert(3)</script>`).Err(); err != nil {
		t.Fatal(err)
	}

	tb := openTab(t, e, 1280, 900)
	tb.open("#/")
	tb.waitText("main h1", "Overview")
	tb.click(`nav a[href="#/cron"]`)
	tb.waitText("main h1", "Periodic entries")
	if got := eval[string](tb, `document.querySelector('nav a[aria-current=page]').getAttribute('href')`); got != "#/cron" {
		t.Fatalf("current navigation link %q", got)
	}
	sweep, nightly := `tr[data-cron="sweep"]`, `tr[data-cron="nightly"]`
	tb.waitText(sweep+" td.state", "active")
	tb.waitText(sweep+" td.spec", "@every 30s")
	tb.waitText(sweep+" td.zone", "UTC")
	tb.waitText(nightly+" td.spec", "30 2 * * *")
	tb.waitText(nightly+" td.zone", "Europe/Paris")
	tb.waitText(nightly+" td.missed", "skip")
	tb.waitText(nightly+" td.payload", payload)
	tb.waitText(nightly, "reports")
	if tb.text(sweep+" td.next time") == "" {
		t.Fatalf("sweep has no next tick: %q", tb.text(sweep))
	}
	tb.waitText("main", evil)
	tb.waitText("main", "malformed definition")
	tb.noMarkup("periodic entries")
	if n := eval[int](tb, `document.querySelectorAll('tr[data-cron] button').length`); n != 2 {
		t.Fatalf("%d buttons, want one per readable entry", n)
	}
	tb.screenshot("cron")

	// Without the token: refused, nothing changes.
	btn := `button[data-key="cron:sweep"]`
	tb.click(btn)
	tb.waitText("#status", "Refused")
	if e.cron("sweep").Paused {
		t.Fatal("paused without the token")
	}

	tb.useToken(token)
	tb.waitText(btn, "Pause")
	tb.click(btn)
	tb.waitFor("the entry paused in Redis", func() bool { ci := e.cron("sweep"); return ci.Paused && ci.NextMS == 0 })
	tb.waitText(sweep+" td.state", "paused")
	tb.waitText(sweep+" td.next", "none while paused")
	tb.waitText(btn, "Resume")
	if e.cron("nightly").Paused {
		t.Fatal("pausing sweep paused nightly")
	}

	tb.click(btn)
	tb.waitFor("the entry resumed in Redis", func() bool { ci := e.cron("sweep"); return !ci.Paused && ci.NextMS > 0 })
	tb.waitText(sweep+" td.state", "active")
	tb.waitText(btn, "Pause")
	tb.noMarkup("periodic entries after the actions")
}
