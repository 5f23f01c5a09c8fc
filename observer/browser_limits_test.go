package observer_test

import (
	"context"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
)

// A queue's page shows its limits: the scope, the rate as dtq limit set reads it, the
// burst and the concurrency with its use; a limit written by hand under a hostile
// function name shows as text. A queue without limits shows no such table.
func TestUIQueueLimits(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(client.Task{Queue: "lim", Function: "send"})
	e.enqueue(client.Task{Queue: "free", Function: "send"})
	for _, l := range []client.Limit{
		{Function: "send", Concurrency: 5},
		{Rate: 100, Per: time.Second, Burst: 10},
		{Function: "report", Rate: 5000, Per: time.Hour, Concurrency: 2},
		{Function: "slow", Rate: 3, Per: 90 * time.Second},
	} {
		if err := e.c.SetLimit(ctx, "lim", l); err != nil {
			t.Fatal(err)
		}
	}
	// Someone else's write: a function name no SetLimit accepts.
	evil := `<img src=x onerror=alert(1)>`
	if err := e.rdb.HSet(ctx, e.ks.Queue("lim").Limits(), evil, "conc=2").Err(); err != nil {
		t.Fatal(err)
	}
	// Two of report's slots held.
	if err := e.rdb.SAdd(ctx, e.ks.Queue("lim").LimitRun("report"), "t1", "t2").Err(); err != nil {
		t.Fatal(err)
	}

	tb := openTab(t, e, 1280, 900)
	tb.open("#/queues/lim")
	tb.waitText("table.limits-table caption", "Limits")
	send, queue, report, slow := `tr[data-limit="send"]`, `tr[data-limit=""]`, `tr[data-limit="report"]`, `tr[data-limit="slow"]`
	tb.waitText(send+" th.scope", "function send")
	tb.waitText(send+" td.concurrency", "0 / 5 running")
	tb.waitText(send+" td.rate", "–")
	tb.waitText(queue+" th.scope", "queue")
	tb.waitText(queue+" td.rate", "100/s")
	tb.waitText(queue+" td.burst", "10")
	tb.waitText(queue+" td.concurrency", "–")
	tb.waitText(report+" td.rate", "5000/h")
	tb.waitText(report+" td.burst", "1")
	tb.waitText(report+" td.concurrency", "2 / 2 running")
	tb.waitText(slow+" td.rate", "3/1m30s")
	if got := eval[[]string](tb, `[...document.querySelectorAll('table.limits-table tbody th.scope')].map(th => th.textContent)`); len(got) != 5 || got[0] != "queue" {
		t.Fatalf("limit rows %q, want the queue's first and five in all", got)
	}
	tb.waitText("table.limits-table", "function "+evil)
	tb.waitText("table.limits-table", "Unreadable")
	tb.noMarkup("queue limits")
	tb.screenshot("limits")

	tb.open("#/queues/free")
	tb.waitText(`[data-stat="lag"] dd`, "1")
	if n := eval[int](tb, `document.querySelectorAll('table.limits-table').length`); n != 0 {
		t.Fatalf("a queue without limits shows %d limits tables", n)
	}
}
