package observer_test

// Browser tests: the dashboard in a real headless Chromium (driven over the DevTools
// protocol by chromedp: real rendering, events and CSP, no Node toolchain) against the
// real observer over a real redis-server, with real workers where the test needs them.
// They fail when no Chromium is installed, unless DTQ_SKIP_BROWSER=1 says to skip them.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/internal/liveness"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/observer"
	"github.com/dtq/dtq/runtime"
)

// chromium finds the browser, or fails the test (skips it only when asked to).
func chromium(t *testing.T) string {
	t.Helper()
	if os.Getenv("DTQ_SKIP_BROWSER") == "1" {
		t.Skip("DTQ_SKIP_BROWSER=1: the browser tests are skipped")
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium or chromium-browser on PATH: install Chromium (apt-get install -y chromium), or set DTQ_SKIP_BROWSER=1 to skip the browser tests")
	return ""
}

// tab is one browser tab on the dashboard of an env.
type tab struct {
	t   *testing.T
	e   *env
	ctx context.Context
	// close ends the browser and reports the dialogs and exceptions seen (at the
	// latest when the test ends).
	close func()

	mu         sync.Mutex
	dialogs    []string // JavaScript dialogs that opened (alert, confirm, prompt)
	exceptions []string // uncaught exceptions of the page
}

// openTab starts a headless Chromium (its own, ended with the test) at width×height.
func openTab(t *testing.T, e *env, width, height int) *tab {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(width, height),
		chromedp.UserDataDir(t.TempDir()))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	tb := &tab{t: t, e: e, ctx: ctx}
	var once sync.Once
	tb.close = func() {
		once.Do(func() {
			_ = chromedp.Cancel(ctx)
			cancel()
			acancel()
			tb.mu.Lock()
			defer tb.mu.Unlock()
			if len(tb.dialogs) > 0 {
				t.Errorf("JavaScript dialogs opened: %q", tb.dialogs)
			}
			if len(tb.exceptions) > 0 {
				t.Errorf("uncaught exceptions in the page: %q", tb.exceptions)
			}
		})
	}
	t.Cleanup(tb.close)
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	exceptions := chromedp.Events(ctx, cdpruntime.ExceptionThrown)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.dialogs = append(tb.dialogs, string(ev.Type)+": "+ev.Message)
			tb.mu.Unlock()
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			tb.mu.Lock()
			tb.exceptions = append(tb.exceptions, msg)
			tb.mu.Unlock()
		}
	}()
	return tb
}

func (tb *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tb.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page, returning its JSON value.
func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// open loads the dashboard at a route (#/...).
func (tb *tab) open(route string) {
	tb.t.Helper()
	tb.do("open "+route, navigate(tb.e.url+"/"+route))
}

func navigate(u string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(chromedp.Navigate(u), chromedp.WaitReady(chromedp.CSS("main")))
}

// text is the textContent of the first element sel matches ("" when none does).
func (tb *tab) text(sel string) string {
	tb.t.Helper()
	return eval[string](tb, fmt.Sprintf(`(document.querySelector(%s) || {}).textContent || ""`, jsString(sel)))
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// waitFor polls cond until it holds; the deadline only turns a hang into a failure.
func (tb *tab) waitFor(what string, cond func() bool) {
	tb.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.t.Fatalf("timed out waiting for %s; the page says: %q", what, eval[string](tb, `document.body.innerText`))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// waitText waits until the element sel matches has text containing want.
func (tb *tab) waitText(sel, want string) {
	tb.t.Helper()
	tb.waitFor(fmt.Sprintf("%s to say %q", sel, want), func() bool { return strings.Contains(tb.text(sel), want) })
}

// click clicks the first element sel matches, once it is there and enabled. A page
// that re-renders between the lookup and the click (a refresh swapping the rows) leaves
// the node found stale: the click is tried again on the element that replaced it.
func (tb *tab) click(sel string) {
	tb.t.Helper()
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
		err := chromedp.Do(ctx, chromedp.WaitEnabled(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)))
		cancel()
		if err == nil {
			return
		}
		if try == 4 || !strings.Contains(err.Error(), "Could not find node with given id") {
			tb.t.Fatalf("click %s: %v", sel, err)
		}
	}
}

// useToken types tok in the token field and submits it with the keyboard.
func (tb *tab) useToken(tok string) {
	tb.t.Helper()
	tb.do("enter the token", chromedp.WaitVisible(chromedp.CSS("#token")), chromedp.SendKeys(chromedp.CSS("#token"), tok+"\r"))
	tb.waitFor("the token kept", func() bool {
		return eval[string](tb, `sessionStorage.getItem('dtq-observer-token') || ""`) == tok
	})
}

// screenshot writes docs/observer/<name>.png when DTQ_SCREENSHOTS=1.
func (tb *tab) screenshot(name string) {
	tb.t.Helper()
	if os.Getenv("DTQ_SCREENSHOTS") != "1" {
		return
	}
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := filepath.Join("..", "docs", "observer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		tb.t.Fatal(err)
	}
}

// startWorker runs a worker in-process on queues until the test ends.
func startWorker(t *testing.T, e *env, queues string) *runtime.Worker {
	t.Helper()
	return startWorkerWith(t, e, function.Registry(), map[string]string{"DTQ_QUEUES": queues})
}

// startWorkerWith runs a worker in-process with the functions of reg until the test
// ends; vars adds to (or replaces) its configuration.
func startWorkerWith(t *testing.T, e *env, reg *runtime.Registry, vars map[string]string) *runtime.Worker {
	t.Helper()
	env := map[string]string{
		"DTQ_REDIS_URL": "redis://" + redistest.Shared(t).Addr(), "DTQ_KEY_PREFIX": e.prefix, "DTQ_LOG_LEVEL": "error",
	}
	maps.Copy(env, vars)
	cfg, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(env))
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.New(runtime.Options{Config: cfg, Redis: e.rdb, Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// status reads a task's status from its record.
func (e *env) status(queue, id string) client.Status {
	e.t.Helper()
	ti, err := e.c.Get(context.Background(), queue, id)
	if err != nil {
		e.t.Fatalf("get %s: %v", id, err)
	}
	return ti.Status
}

func (e *env) paused(queue string) bool {
	e.t.Helper()
	p, err := e.c.Paused(context.Background(), queue)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func TestUIOverviewUpdatesWithoutReload(t *testing.T) {
	e := newEnv(t, nil)
	e.enqueue(client.Task{Queue: "emails", Function: "echo", Payload: []byte(`{"to":"a@b.c"}`), Priority: 7})
	e.rdb.SAdd(context.Background(), e.ks.Workers(), "worker-ui-1")
	e.rdb.HSet(context.Background(), e.ks.Worker("worker-ui-1"), liveness.FieldWorkerID, "worker-ui-1",
		liveness.FieldStatus, string(liveness.Ready), liveness.FieldLastHeartbeat, time.Now().UnixMilli(),
		liveness.FieldIntervalMS, 600_000, liveness.FieldHostname, "host-a")

	tb := openTab(t, e, 1280, 900)
	tb.open("#/")
	lag := `tr[data-queue="emails"] td.lag`
	tb.waitText(lag, "1")
	tb.waitText(`tr[data-worker="worker-ui-1"] td.liveness`, "live")
	if got := eval[int](tb, `document.querySelectorAll('tr[data-queue="emails"] svg.bands rect.band-lag').length`); got != 1 {
		t.Fatalf("band bars of lag: %d, want 1 (one band holds work)", got)
	}
	// A mark in the page's memory: gone if the page reloads.
	eval[int](tb, `window.dtqMark = 42`)
	e.enqueue(client.Task{Queue: "emails", Function: "echo", Priority: 3})
	tb.waitText(lag, "2")
	if got := eval[int](tb, `window.dtqMark || 0`); got != 42 {
		t.Fatalf("the page reloaded to show the change (mark %d)", got)
	}
	tb.screenshot("overview")
	tb.do("phone width", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	tb.waitText(lag, "2")
	if w := eval[int](tb, `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("at phone width the page is %d px wide: it scrolls sideways", w)
	}
	tb.screenshot("overview-phone")
}

// While the tab is hidden the page sends nothing; shown again, it reads at once.
func TestUIPollsOnlyWhileVisible(t *testing.T) {
	e := newEnv(t, nil)
	e.enqueue(client.Task{Queue: "emails", Function: "echo"})
	tb := openTab(t, e, 1280, 900)
	tb.open("#/")
	tb.waitText(`tr[data-queue="emails"] td.lag`, "1")
	eval[int](tb, `window.fetches = 0; const f = window.fetch; window.fetch = (...a) => { window.fetches++; return f(...a); }; 0`)
	tb.waitFor("the page to poll while visible", func() bool { return eval[int](tb, `window.fetches`) >= 2 })

	eval[int](tb, `Object.defineProperty(document, 'hidden', {value: true, configurable: true});
		document.dispatchEvent(new Event('visibilitychange')); window.fetches = 0; window.hiddenAt = performance.now(); 0`)
	// A negative claim needs a window: three poll intervals of the page's own clock.
	tb.waitFor("three poll intervals", func() bool { return eval[bool](tb, `performance.now() - window.hiddenAt > 6500`) })
	if n := eval[int](tb, `window.fetches`); n != 0 {
		t.Fatalf("%d requests while hidden", n)
	}
	e.enqueue(client.Task{Queue: "emails", Function: "echo"})
	eval[int](tb, `Object.defineProperty(document, 'hidden', {value: false, configurable: true});
		document.dispatchEvent(new Event('visibilitychange')); 0`)
	tb.waitText(`tr[data-queue="emails"] td.lag`, "2")
}

func TestUIPauseStopsTheWorker(t *testing.T) {
	e := newEnv(t, nil)
	startWorker(t, e, "jobs,other")
	tb := openTab(t, e, 1280, 900)
	tb.open("#/queues/jobs")
	tb.waitText("main h1", "jobs")
	tb.useToken(token)
	tb.waitText(".queue-state", "active")
	tb.click(`button[data-key="pause"]`)
	tb.waitFor("the queue paused in Redis", func() bool { return e.paused("jobs") })
	tb.waitText(".queue-state", "paused")
	tb.waitText(`button[data-key="pause"]`, "Resume")

	a := e.enqueue(client.Task{Queue: "jobs", Function: "echo", Payload: []byte(`"a"`)})
	// The worker serves jobs first, then other: once it ran b1 and then b2 (each
	// enqueued after a), it made passes over jobs after a was there, and left a.
	for i := range 2 {
		b := e.enqueue(client.Task{Queue: "other", Function: "echo", Payload: []byte(fmt.Sprint(i))})
		tb.waitFor("the task of the other queue to succeed", func() bool { return e.status("other", b) == client.StatusSucceeded })
		if s := e.status("jobs", a); s != client.StatusQueued {
			t.Fatalf("task of the paused queue: %s, want queued", s)
		}
	}
	tb.waitText(`[data-stat="lag"] dd`, "1")
	tb.waitText(`tr[data-task="`+a+`"]`, a)
	tb.screenshot("queue")

	tb.click(`button[data-key="pause"]`)
	tb.waitFor("the task to run after the resume", func() bool { return e.status("jobs", a) == client.StatusSucceeded })
	tb.waitText(".queue-state", "active")
	tb.waitText(`[data-stat="lag"] dd`, "0")
	if e.paused("jobs") {
		t.Fatal("still paused")
	}
}

func TestUIRequeueDeadTask(t *testing.T) {
	e := newEnv(t, nil)
	var dead []string
	for range 3 {
		e.enqueue(client.Task{Queue: "mail", Function: "echo", Payload: []byte(`{"n":1}`)})
		dead = append(dead, e.finish("mail", 'd'))
	}
	startWorker(t, e, "mail")
	tb := openTab(t, e, 1280, 900)
	tb.open("#/dead/mail")
	tb.useToken(token)
	for _, id := range dead {
		tb.waitText(`tr[data-task="`+id+`"]`, "boom")
	}
	tb.screenshot("dead")

	// One by its row's button.
	tb.click(`button[data-key="rq:` + dead[0] + `"]`)
	tb.waitFor("the requeued task to succeed", func() bool { return e.status("mail", dead[0]) == client.StatusSucceeded })
	tb.waitFor("its row to leave", func() bool { return tb.text(`tr[data-task="`+dead[0]+`"]`) == "" })

	// The others selected, then requeued together.
	for _, id := range dead[1:] {
		tb.click(`input[data-id="` + id + `"]`)
	}
	tb.waitText(`button[data-key="rq-sel"]`, "(2)")
	tb.click(`button[data-key="rq-sel"]`)
	for _, id := range dead[1:] {
		tb.waitFor("the selected tasks to succeed", func() bool { return e.status("mail", id) == client.StatusSucceeded })
	}
	tb.waitText("main", "No dead tasks.")
}

func TestUIDataRendersAsText(t *testing.T) {
	e := newEnv(t, nil)
	const payload = `<img src=x onerror=alert(1)>`
	id := e.enqueue(client.Task{Queue: "xss", Function: "echo", Payload: []byte(payload)})
	// A worker record whose every field is markup (someone else's write).
	evil := `<img src=x onerror=alert(2)>`
	e.rdb.SAdd(context.Background(), e.ks.Workers(), evil)
	e.rdb.HSet(context.Background(), e.ks.Worker(evil), liveness.FieldWorkerID, evil, liveness.FieldStatus, "<script>alert(3)</script>",
		liveness.FieldLastHeartbeat, time.Now().UnixMilli(), liveness.FieldIntervalMS, 600_000, liveness.FieldHostname, evil, "queues", evil)

	tb := openTab(t, e, 1280, 900)
	noMarkup := tb.noMarkup

	tb.open("#/")
	tb.waitText(`main`, evil)
	tb.waitText(`main`, "<script>alert(3)</script>")
	noMarkup("overview")

	tb.open("#/queues/xss/tasks/" + id)
	tb.waitText(`section[data-part="payload"] pre.value`, payload)
	noMarkup("task page")
	tb.screenshot("task")

	tb.open("#/queues/xss")
	tb.waitText(`tr[data-task="`+id+`"]`, id)
	noMarkup("queue page")

	// A queue name no enqueue accepts: the page names it and shows the API's refusal,
	// both as text.
	name := `"><script>alert(1)</script>`
	tb.do("open a queue of a hostile name", chromedp.Navigate(e.url+"/#/queues/"+urlPathEscape(name)))
	tb.waitText("main h1", name)
	tb.waitText("main p.error", "bad_queue")
	tb.waitText("main p.error", `script`)
	noMarkup("queue of a hostile name")
	tb.do("open the dead letters of a hostile name", chromedp.Navigate(e.url+"/#/dead/"+urlPathEscape(name)))
	tb.waitText("main h1", name)
	tb.waitText("main p.error", "bad_queue")
	noMarkup("dead letters of a hostile name")
	if n := eval[int](tb, `document.title.includes('<script>') ? 1 : 0`); n != 1 {
		t.Fatalf("title %q: the name is not there as text", eval[string](tb, `document.title`))
	}
}

// noMarkup fails the test when the page holds an element made from data: the page's
// own are one module script and no image at all.
func (tb *tab) noMarkup(where string) {
	tb.t.Helper()
	if n := eval[int](tb, `document.querySelectorAll('img, iframe, object, embed').length`); n != 0 {
		tb.t.Fatalf("%s: %d elements made from data", where, n)
	}
	if n := eval[int](tb, `document.querySelectorAll('script').length`); n != 1 {
		tb.t.Fatalf("%s: %d script elements, want the page's one", where, n)
	}
	if n := eval[int](tb, `document.querySelectorAll('[onerror], [onload]').length`); n != 0 {
		tb.t.Fatalf("%s: %d elements with handlers from data", where, n)
	}
}

func urlPathEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func TestUIActionsRefused(t *testing.T) {
	t.Run("no token", func(t *testing.T) {
		e := newEnv(t, nil)
		e.enqueue(client.Task{Queue: "jobs", Function: "echo"})
		tb := openTab(t, e, 1280, 900)
		tb.open("#/queues/jobs")
		// With the keyboard: the button takes the focus and Enter presses it.
		tb.do("press Pause with the keyboard", chromedp.WaitEnabled(chromedp.CSS(`button[data-key="pause"]`)),
			chromedp.Focus(chromedp.CSS(`button[data-key="pause"]`)), chromedp.KeyEvent("\r"))
		tb.waitText("#status", "Refused")
		tb.waitText("#status", "token")
		if !eval[bool](tb, `document.activeElement === document.getElementById('token')`) {
			t.Fatal("the token field is not focused after the 401")
		}
		if e.paused("jobs") {
			t.Fatal("paused without the token")
		}
		// A wrong token is refused too.
		tb.useToken("not-the-token-0123456789")
		tb.click(`button[data-key="pause"]`)
		tb.waitText("#status", "wrong token")
		if e.paused("jobs") {
			t.Fatal("paused with a wrong token")
		}
	})
	t.Run("reads closed", func(t *testing.T) {
		e := newEnv(t, func(c *observer.Config) { c.ReadOpen = false })
		e.enqueue(client.Task{Queue: "jobs", Function: "echo"})
		tb := openTab(t, e, 1280, 900)
		tb.open("#/")
		tb.waitText("main", "Reading the queues needs the token")
		tb.waitText("#status", "enter it in the Token field")
		tb.useToken(token)
		tb.waitText(`tr[data-queue="jobs"] td.lag`, "1")
		tb.waitFor("the request for the token gone", func() bool { return !strings.Contains(tb.text("#status"), "Token field") })
	})
	t.Run("actions off", func(t *testing.T) {
		e := newEnv(t, func(c *observer.Config) { c.Token = "" })
		e.enqueue(client.Task{Queue: "jobs", Function: "echo"})
		tb := openTab(t, e, 1280, 900)
		tb.open("#/queues/jobs")
		tb.useToken(token)
		tb.click(`button[data-key="pause"]`)
		tb.waitText("#status", "actions are off")
		tb.waitText(`button[data-key="pause"]`, "Actions are off")
		if !eval[bool](tb, `document.querySelector('button[data-key="pause"]').disabled`) {
			t.Fatal("the action button is still enabled")
		}
		if e.paused("jobs") {
			t.Fatal("paused with the actions off")
		}
		// Buttons drawn later say so too.
		tb.open("#/dead/jobs")
		tb.open("#/queues/jobs")
		tb.waitText(".queue-state", "active")
		tb.waitText(`button[data-key="pause"]`, "Actions are off")
	})
}

const wantCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// rawGet fetches a path of the observer, whatever its content type.
func (e *env) rawGet(path string) resp {
	e.t.Helper()
	res, err := http.Get(e.url + path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, body: string(b), header: res.Header}
}

func TestUIContentSecurityPolicy(t *testing.T) {
	e := newEnv(t, nil)
	for _, path := range []string{"/", "/ui/app.js", "/ui/app.css", "/ui/nothing.js"} {
		r := e.rawGet(path)
		if got := r.header.Get("Content-Security-Policy"); got != wantCSP {
			t.Errorf("%s: CSP %q", path, got)
		}
		if r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s: headers %v", path, r.header)
		}
	}
	if res, err := http.Head(e.url + "/"); err != nil || res.StatusCode != http.StatusOK || res.Header.Get("Content-Security-Policy") != wantCSP {
		t.Errorf("HEAD /: %v %v", res, err)
	} else {
		_ = res.Body.Close()
	}

	tb := openTab(t, e, 1280, 900)
	tb.open("#/")
	tb.waitText("main h1", "Overview")
	// A script injected into the page (as an HTML injection would) is not run, and the
	// browser reports the violation.
	eval[int](tb, `window.violations = []; document.addEventListener('securitypolicyviolation', e => window.violations.push(e.violatedDirective)); 0`)
	eval[int](tb, `(() => { const s = document.createElement('script'); s.textContent = 'window.injected = 1'; document.body.append(s); return 0 })()`)
	eval[int](tb, `(() => { const d = document.createElement('div'); d.setAttribute('onclick', 'window.injected = 2'); document.body.append(d); d.click(); return 0 })()`)
	tb.waitFor("two violation reports", func() bool { return eval[int](tb, `window.violations.length`) >= 2 })
	if got := eval[int](tb, `window.injected || 0`); got != 0 {
		t.Fatalf("injected script ran (%d)", got)
	}
	if v := eval[string](tb, `window.violations.join(' ')`); !strings.Contains(v, "script-src") {
		t.Fatalf("violations %q", v)
	}
}

// TestUIFirstLoadFigure prints the dashboard's first load in a cold Chromium: the bytes
// transferred (HTML, CSS, JS and the API's first answers) and the time to the first
// paint and to the first drawn data. A figure for the README, not a check: it runs
// only with DTQ_UI_FIGURE=1.
func TestUIFirstLoadFigure(t *testing.T) {
	if os.Getenv("DTQ_UI_FIGURE") != "1" {
		t.Skip("a measurement, run on demand: DTQ_UI_FIGURE=1")
	}
	e := newEnv(t, nil)
	for _, q := range []string{"emails", "reports", "thumbnails"} {
		e.enqueue(client.Task{Queue: q, Function: "echo", Payload: []byte(`{"n":1}`)})
	}
	startWorker(t, e, "other")
	type resource struct {
		Name     string  `json:"name"`
		Transfer float64 `json:"transfer"`
		Body     float64 `json:"body"`
		Decoded  float64 `json:"decoded"`
	}
	type load struct {
		Resources   []resource `json:"resources"`
		FirstPaint  float64    `json:"fcp"`
		FirstRender float64    `json:"render"`
	}
	const runs = 5
	var loads []load
	for range runs {
		tb := openTab(t, e, 1280, 900)
		tb.open("#/")
		tb.waitFor("the first render", func() bool {
			return eval[bool](tb, `performance.getEntriesByName('dtq-first-render').length > 0`)
		})
		l := eval[load](tb, `(() => {
			const nav = performance.getEntriesByType('navigation')[0];
			const res = [nav, ...performance.getEntriesByType('resource')].map(r => ({
				name: new URL(r.name).pathname, transfer: r.transferSize, body: r.encodedBodySize, decoded: r.decodedBodySize }));
			const fcp = performance.getEntriesByName('first-contentful-paint')[0];
			return { resources: res, fcp: fcp ? fcp.startTime : -1,
				render: performance.getEntriesByName('dtq-first-render')[0].startTime };
		})()`)
		loads = append(loads, l)
		tb.close()
	}
	var total, api, body, decoded float64
	for _, r := range loads[0].Resources {
		t.Logf("%-28s transferred %6.0f B, body %6.0f B (%6.0f B decoded)", r.Name, r.Transfer, r.Body, r.Decoded)
		total += r.Transfer
		body += r.Body
		decoded += r.Decoded
		if strings.HasPrefix(r.Name, "/api/") {
			api += r.Transfer
		}
	}
	t.Logf("first load: %d requests, %.0f B transferred (%.0f B of them the API's answers); bodies %.0f B gzipped, %.0f B decoded",
		len(loads[0].Resources), total, api, body, decoded)
	var fcp, render []float64
	for _, l := range loads {
		fcp, render = append(fcp, l.FirstPaint), append(render, l.FirstRender)
	}
	slices.Sort(fcp)
	slices.Sort(render)
	t.Logf("over %d cold loads: first contentful paint median %.0f ms (%.0f–%.0f), data drawn median %.0f ms (%.0f–%.0f)",
		runs, fcp[runs/2], fcp[0], fcp[runs-1], render[runs/2], render[0], render[runs-1])
}
