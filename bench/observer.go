package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dtq/dtq/client"
)

// observerResult is one run of the observer mode.
type observerResult struct {
	Queues         int     `json:"queues"`
	QueuesReps     int     `json:"queues_reps"`
	QueuesP50MS    float64 `json:"queues_p50_ms"`
	QueuesP99MS    float64 `json:"queues_p99_ms"`
	ListTasks      int     `json:"list_tasks"`
	ListPages      int     `json:"list_pages"`
	ListP50MS      float64 `json:"list_p50_ms"`
	ListP99MS      float64 `json:"list_p99_ms"`
	Dashboards     int     `json:"dashboards"`
	Browser        bool    `json:"browser"` // the dashboards are Chromium tabs (else HTTP clients doing what one does)
	DashboardSecs  float64 `json:"dashboard_s"`
	DashboardReqs  int64   `json:"dashboard_requests"` // served by the observer while the dashboards were open
	DashboardErrs  int64   `json:"dashboard_errors"`
	EventsReceived int64   `json:"events_received"`
	RSSIdleMB      float64 `json:"rss_idle_mb"`
	RSSDashMB      float64 `json:"rss_dashboards_mb"`
}

func (r observerResult) figures() []figure {
	return []figure{
		fig("queues_p50_ms", r.QueuesP50MS), fig("queues_p99_ms", r.QueuesP99MS),
		fig("list_p50_ms", r.ListP50MS), fig("list_p99_ms", r.ListP99MS),
		fig("rss_idle_mb", r.RSSIdleMB), fig("rss_dashboards_mb", r.RSSDashMB),
		fig("dashboard_requests", float64(r.DashboardReqs)), fig("dashboard_errors", float64(r.DashboardErrs)),
		fig("events_received", float64(r.EventsReceived)),
	}
}

// runObserver measures a real dtq-observer process: GET /api/v1/queues over 100 queues ×
// 10 bands; pages of GET /api/v1/queues/{q}/tasks followed by their cursors through a
// queue of --n tasks (default 1 000 000); and the observer's resident memory at rest and
// while ten dashboards are open as tasks flow: ten tabs of a headless Chromium (Debian's
// chromium on PATH) on the overview, or, without Chromium, ten clients doing what an
// open dashboard does (poll the queues and the workers every 2 s, and hold the event
// stream open).
func runObserver(ctx context.Context, e *benchEnv, o options) (observerResult, error) {
	var r observerResult
	reps := o.reps
	if reps == 0 {
		reps = 1000
	}
	n := o.n
	if n == 0 {
		n = 1_000_000
	}
	bin := filepath.Join(filepath.Dir(e.dtq), "dtq-observer")
	if _, err := os.Stat(bin); err != nil {
		return r, fmt.Errorf("dtq-observer next to dtq: %w", err)
	}
	prefix := e.prefix()
	defer e.drop(prefix)
	c := e.client(prefix)

	// 100 queues, 3 tasks in each band.
	var seed []client.Task
	for i := 0; i < 100; i++ {
		for p := 0; p < 10; p++ {
			for k := 0; k < 3; k++ {
				seed = append(seed, client.Task{Queue: fmt.Sprintf("q%03d", i), Function: "noop", Priority: p})
			}
		}
	}
	if _, err := c.EnqueueMany(ctx, seed); err != nil {
		return r, err
	}
	// The big queue, in batches.
	e.logf("enqueueing %d tasks on queue big", n)
	pr := newProgress("enqueue big", int64(n))
	batch := make([]client.Task, 0, 1000)
	for done := 0; done < n; {
		batch = batch[:0]
		for len(batch) < cap(batch) && done+len(batch) < n {
			batch = append(batch, client.Task{Queue: "big", Function: "noop", Priority: (done + len(batch)) % 10,
				Payload: []byte(`{"to":"someone@example.com"}`)})
		}
		res, err := c.EnqueueMany(ctx, batch)
		if err != nil {
			return r, err
		}
		for _, x := range res {
			if x.Err != nil {
				return r, x.Err
			}
		}
		done += len(batch)
		pr.set(int64(done))
	}
	pr.done()

	port, err := freePort()
	if err != nil {
		return r, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "DTQ_REDIS_URL="+e.url, "DTQ_KEY_PREFIX="+prefix, "PORT="+strconv.Itoa(port), "DTQ_LOG_LEVEL=error")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return r, err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if res, err := hc.Get(base + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("dtq-observer not ready after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	get := func(path string, into any) (float64, error) {
		t0 := time.Now()
		res, err := hc.Get(base + path)
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(res.Body)
			return 0, fmt.Errorf("GET %s: %d %s", path, res.StatusCode, b)
		}
		if into != nil {
			err = json.NewDecoder(res.Body).Decode(into)
		} else {
			_, err = io.Copy(io.Discard, res.Body)
		}
		return float64(time.Since(t0).Microseconds()) / 1000, err
	}

	// GET /api/v1/queues: 101 queues (the 100 and big).
	var qs struct {
		Queues []json.RawMessage `json:"queues"`
	}
	if _, err := get("/api/v1/queues", &qs); err != nil {
		return r, err
	}
	r.Queues = len(qs.Queues)
	if r.Queues != 101 {
		return r, fmt.Errorf("/api/v1/queues lists %d queues, want 101", r.Queues)
	}
	lat := make([]float64, 0, reps)
	pr = newProgress("GET /api/v1/queues", int64(reps))
	for i := 0; i < reps; i++ {
		ms, err := get("/api/v1/queues", nil)
		if err != nil {
			return r, err
		}
		lat = append(lat, ms)
		pr.set(int64(i + 1))
	}
	pr.done()
	sort.Float64s(lat)
	r.QueuesReps, r.QueuesP50MS, r.QueuesP99MS = reps, round(pct(lat, .5), 3), round(pct(lat, .99), 3)

	// Pages of the big queue, 100 tasks each, following the cursors.
	r.ListTasks = n
	pages := min(reps, n/100)
	lat = lat[:0]
	cursor, seen := "", 0
	pr = newProgress("task pages", int64(pages))
	for i := 0; i < pages; i++ {
		var page struct {
			Items      []json.RawMessage `json:"items"`
			NextCursor string            `json:"next_cursor"`
		}
		ms, err := get("/api/v1/queues/big/tasks?state=queued&limit=100&cursor="+url.QueryEscape(cursor), &page)
		if err != nil {
			return r, err
		}
		lat = append(lat, ms)
		seen += len(page.Items)
		cursor = page.NextCursor
		pr.set(int64(i + 1))
		if cursor == "" {
			break
		}
	}
	pr.done()
	if seen != len(lat)*100 {
		return r, fmt.Errorf("%d pages held %d tasks, want 100 each", len(lat), seen)
	}
	sort.Float64s(lat)
	r.ListPages, r.ListP50MS, r.ListP99MS = len(lat), round(pct(lat, .5), 3), round(pct(lat, .99), 3)

	r.RSSIdleMB = rssMB(cmd.Process.Pid)

	// Ten dashboards for --duration (default 30 s) while workers run the 100 queues'
	// tasks and a trickle keeps events coming.
	dur := o.duration
	if dur == 0 {
		dur = 30 * time.Second
	}
	r.Dashboards, r.DashboardSecs = 10, dur.Seconds()
	served0 := observerRequests(hc, base)
	dctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var errs, events atomic.Int64
	var wg sync.WaitGroup
	if chromium := browserPath(); chromium != "" {
		// Real dashboards: ten tabs of one headless Chromium on the overview, which polls
		// and streams the events as it does for an operator.
		r.Browser = true
		stopTabs, err := openDashboards(dctx, chromium, base+"/", r.Dashboards)
		if err != nil {
			return r, err
		}
		defer stopTabs()
	}
	for d := 0; d < r.Dashboards && !r.Browser; d++ {
		wg.Add(2)
		go func() { // polling, as the overview does
			defer wg.Done()
			tick := time.NewTicker(2 * time.Second)
			defer tick.Stop()
			for {
				for _, p := range []string{"/api/v1/queues", "/api/v1/workers"} {
					if _, err := get(p, nil); err != nil && dctx.Err() == nil {
						errs.Add(1)
					}
				}
				select {
				case <-dctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
		go func() { // the live event stream
			defer wg.Done()
			req, _ := http.NewRequestWithContext(dctx, http.MethodGet, base+"/api/v1/events", nil)
			res, err := (&http.Client{}).Do(req)
			if err != nil {
				if dctx.Err() == nil {
					errs.Add(1)
				}
				return
			}
			defer res.Body.Close()
			if res.StatusCode != http.StatusOK {
				errs.Add(1)
				return
			}
			sc := bufio.NewScanner(res.Body)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "id:") {
					events.Add(1)
				}
			}
		}()
	}
	// Events to stream: tasks that die at once (TASK_DEAD is always published).
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-dctx.Done():
				return
			case <-tick.C:
			}
			_, _, _ = c.Enqueue(dctx, client.Task{Queue: "q000", Function: "fail", Payload: []byte(`{"times":9}`), MaxRetries: client.Retries(0)})
		}
	}()
	w := exec.Command(e.dtq, "worker")
	w.Env = append(os.Environ(), "DTQ_REDIS_URL="+e.url, "DTQ_KEY_PREFIX="+prefix, "DTQ_QUEUES=q000", "PORT=0",
		"DTQ_LOG_LEVEL=error")
	w.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := w.Start(); err != nil {
		return r, err
	}
	defer func() { _ = w.Process.Signal(syscall.SIGTERM); _ = w.Wait() }()
	// The resident set at its peak, sampled every 100 ms.
	var peak float64
	for dctx.Err() == nil {
		peak = max(peak, rssMB(cmd.Process.Pid))
		select {
		case <-dctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	wg.Wait()
	r.RSSDashMB = peak
	r.DashboardReqs, r.DashboardErrs, r.EventsReceived = observerRequests(hc, base)-served0, errs.Load(), events.Load()
	return r, nil
}

// rssMB is the resident set of a process in MiB (VmRSS), or 0 when unreadable.
func rssMB(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return round(kb/1024, 1)
		}
	}
	return 0
}

// browserPath is Chromium's executable on PATH, or "".
func browserPath() string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// openDashboards opens n tabs of one headless Chromium on url and waits until each has
// drawn the overview; stop closes the browser.
func openDashboards(ctx context.Context, chromium, url string, n int) (stop func(), err error) {
	dir, err := os.MkdirTemp("", "dtq-bench-chromium-")
	if err != nil {
		return nil, err
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Headless, chromedp.DisableGPU, chromedp.UserDataDir(dir))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	stop = func() {
		bcancel()
		acancel()
		_ = os.RemoveAll(dir)
	}
	// The browser starts on the first call, and lives as long as the context of that call:
	// bctx, not a bounded child of it.
	if err := chromedp.Do(bctx); err != nil {
		stop()
		return nil, fmt.Errorf("start %s: %w", chromium, err)
	}
	for i := 0; i < n; i++ {
		tctx := bctx
		if i > 0 {
			tctx, _ = chromedp.NewContext(bctx) // a new tab; closed with the browser
			if err := chromedp.Do(tctx); err != nil {
				stop()
				return nil, fmt.Errorf("dashboard tab %d: %w", i+1, err)
			}
		}
		wctx, cancel := context.WithTimeout(tctx, 30*time.Second)
		err := chromedp.Do(wctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("main table")))
		cancel()
		if err != nil {
			stop()
			return nil, fmt.Errorf("dashboard tab %d: %w", i+1, err)
		}
	}
	return stop, nil
}

// observerRequests is the requests the observer has served (its
// dtq_observer_requests_total, every route and code), or 0 when unreadable.
func observerRequests(hc *http.Client, base string) int64 {
	res, err := hc.Get(base + "/metrics")
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	var n float64
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "dtq_observer_requests_total{") {
			if i := strings.LastIndexByte(line, ' '); i > 0 {
				v, _ := strconv.ParseFloat(line[i+1:], 64)
				n += v
			}
		}
	}
	return int64(n)
}
