package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/redisconn"
	"github.com/dtq/dtq/runtime"
)

// inproc runs the workers as goroutines of this process (Options.InProcess): for Redis
// faults, where nothing kills a worker, so a test can check with goleak that a worker
// reconnecting through drops and restarts leaves no goroutine behind.
type inproc struct {
	env    []string
	dir    string // the ledger's
	logDir string // the workers' logs (worker-ID.log, as the supervisor's)

	mu      sync.Mutex
	ws      []*inworker
	crashes []string
}

type inworker struct {
	id     string
	w      *runtime.Worker
	rdb    redis.UniversalClient
	l      *Ledger
	log    *os.File
	cancel context.CancelFunc
	done   chan struct{}
}

func (ip *inproc) start(slot int, extra ...string) error {
	m := map[string]string{}
	for _, kv := range append(append([]string(nil), ip.env...), extra...) {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	id := fmt.Sprintf("%s-in%d", m["DTQ_KEY_PREFIX"], slot)
	m["DTQ_WORKER_ID"] = id
	cfg, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(m))
	if err != nil {
		return err
	}
	rdb, err := redisconn.Open(cfg.RedisURL, redisconn.Options{PoolSize: cfg.Concurrency + 16, Name: id})
	if err != nil {
		return err
	}
	l, err := OpenLedger(ip.dir, id)
	if err != nil {
		_ = rdb.Close()
		return err
	}
	// The log is kept beside the ledger (at info: the loops' restarts and the keys
	// they find broken), to read when an invariant fails.
	lf, err := os.Create(filepath.Join(ip.logDir, "worker-"+id+".log"))
	if err != nil {
		_ = rdb.Close()
		_ = l.Close()
		return err
	}
	w, err := runtime.New(runtime.Options{Config: cfg, Redis: rdb, Registry: Registry(l), Logger: logger(lf, "info")})
	if err != nil {
		_ = rdb.Close()
		_ = l.Close()
		_ = lf.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	iw := &inworker{id: id, w: w, rdb: rdb, l: l, log: lf, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(iw.done)
		err := w.Run(ctx)
		if ctx.Err() == nil || err != nil {
			ip.mu.Lock()
			ip.crashes = append(ip.crashes, fmt.Sprintf("in-process worker %s: Run returned %v before it was stopped", id, err))
			ip.mu.Unlock()
		}
	}()
	ip.mu.Lock()
	ip.ws = append(ip.ws, iw)
	ip.mu.Unlock()
	return nil
}

// loopRestarts sums dtq_worker_loop_restarts_total over the workers, read from their
// /metrics as an operator would.
func (ip *inproc) loopRestarts() int {
	ip.mu.Lock()
	ws := append([]*inworker(nil), ip.ws...)
	ip.mu.Unlock()
	total := 0
	for _, iw := range ws {
		rec := httptest.NewRecorder()
		iw.w.Handler().ServeHTTP(rec, httptest.NewRequest("GET", runtime.PathMetrics, nil))
		sc := bufio.NewScanner(rec.Body)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "dtq_worker_loop_restarts_total{") {
				if i := strings.LastIndexByte(line, ' '); i > 0 {
					v, _ := strconv.ParseFloat(line[i+1:], 64)
					total += int(v)
				}
			}
		}
	}
	return total
}

// stopAll drains every worker (as SIGTERM would), then closes its client and ledger.
func (ip *inproc) stopAll(limit time.Duration) {
	ip.mu.Lock()
	ws := append([]*inworker(nil), ip.ws...)
	ip.mu.Unlock()
	for _, iw := range ws {
		iw.cancel()
	}
	for _, iw := range ws {
		t := time.NewTimer(limit)
		select {
		case <-iw.done:
		case <-t.C:
			ip.mu.Lock()
			ip.crashes = append(ip.crashes, fmt.Sprintf("in-process worker %s did not stop within %s", iw.id, limit))
			ip.mu.Unlock()
			<-iw.done
		}
		t.Stop()
		_ = iw.rdb.Close()
		_ = iw.l.Close()
		_ = iw.log.Close()
	}
}

func (ip *inproc) crashList() []string {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	return append([]string(nil), ip.crashes...)
}
