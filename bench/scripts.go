package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// scriptsResult is one run of the scripts mode: per task, the Redis time (µs) of each
// phase and, with --callgrind, the instructions Redis executed (nil without).
type scriptsResult struct {
	N                  int      `json:"n"`
	EnqueueRedisUs     float64  `json:"enqueue_redis_us"`
	ClaimRedisUs       float64  `json:"claim_redis_us"`
	CompleteRedisUs    float64  `json:"complete_redis_us"`
	EnqueueRedisInstr  *float64 `json:"enqueue_redis_instr,omitempty"`
	ClaimRedisInstr    *float64 `json:"claim_redis_instr,omitempty"`
	CompleteRedisInstr *float64 `json:"complete_redis_instr,omitempty"`
	Succeeded          int      `json:"succeeded"`
	Lost               int      `json:"lost"`
}

func (r scriptsResult) figures() []figure {
	return []figure{
		fig("enqueue_redis_us", r.EnqueueRedisUs), fig("claim_redis_us", r.ClaimRedisUs), fig("complete_redis_us", r.CompleteRedisUs),
		optFig("enqueue_redis_instr", r.EnqueueRedisInstr), optFig("claim_redis_instr", r.ClaimRedisInstr),
		optFig("complete_redis_instr", r.CompleteRedisInstr), fig("lost", float64(r.Lost)),
	}
}

// runScripts measures what each hot script costs Redis per task, one phase at a time
// and no worker: N no-op tasks are enqueued (EnqueueMany), then claimed 32 a call, then
// completed 32 a call. Each phase's figure is the EVALSHA time Redis reports in INFO
// commandstats, per task. With --callgrind, for a redis-server running under
//
//	valgrind --tool=callgrind --collect-atstart=yes redis-server --port P --save '' --appendonly no
//
// the phases are also cut with callgrind_control (--zero before, --dump after) and the
// instructions Redis executed per task are read from the dumps: exact and repeatable
// where times on a shared VM are not.
func runScripts(ctx context.Context, e *benchEnv, o options) (scriptsResult, error) {
	n := o.n
	if n == 0 {
		n = 3200
	}
	if o.callgrind && e.redisPID == 0 {
		return scriptsResult{}, fmt.Errorf("--callgrind needs the pid of the redis-server (INFO server)")
	}
	prefix := e.prefix()
	defer e.drop(prefix)
	c := e.client(prefix)
	q := keys.New(prefix).Queue(benchQueue)
	if err := lua.Load(ctx, e.rdb); err != nil {
		return scriptsResult{}, err
	}
	r := scriptsResult{N: n}
	phase := func(name string, us *float64, instr **float64, f func() error) error {
		if o.callgrind {
			if out, err := exec.Command("callgrind_control", "--zero", strconv.Itoa(e.redisPID)).CombinedOutput(); err != nil {
				return fmt.Errorf("callgrind_control --zero: %v: %s", err, out)
			}
		}
		us0, err := e.evalshaMicros(ctx)
		if err != nil {
			return err
		}
		if err := f(); err != nil {
			return err
		}
		us1, err := e.evalshaMicros(ctx)
		if err != nil {
			return err
		}
		*us = round(float64(us1-us0)/float64(n), 2)
		if o.callgrind {
			ins, err := e.callgrindDump(name)
			if err != nil {
				return err
			}
			*instr = some(round(float64(ins)/float64(n), 0))
		}
		return nil
	}

	var ids []string
	if err := phase("enqueue", &r.EnqueueRedisUs, &r.EnqueueRedisInstr, func() error {
		var err error
		ids, _, err = enqueueNoops(ctx, c, n, "noop", nil)
		return err
	}); err != nil {
		return scriptsResult{}, err
	}
	var held [][]lua.Completion
	if err := phase("claim", &r.ClaimRedisUs, &r.ClaimRedisInstr, func() error {
		for got := 0; got < n; {
			res, err := lua.Claim.Run(ctx, e.rdb, lua.ClaimArgs{Queue: q, Consumer: "scripts", NowMS: time.Now().UnixMilli(), Want: 32, MaxPayload: 1 << 20})
			if err != nil {
				return err
			}
			if len(res.Started) == 0 {
				return fmt.Errorf("claim started nothing after %d of %d tasks", got, n)
			}
			items := succeeded(res.Started)
			held = append(held, items)
			got += len(items)
		}
		return nil
	}); err != nil {
		return scriptsResult{}, err
	}
	if err := phase("complete", &r.CompleteRedisUs, &r.CompleteRedisInstr, func() error {
		for _, items := range held {
			applied, err := lua.Complete.Run(ctx, e.rdb, lua.CompleteArgs{Queue: q, NowMS: time.Now().UnixMilli(), KeepMS: 86400000, Items: items, Consumer: "scripts"})
			if err != nil {
				return err
			}
			for i, code := range applied {
				if code != lua.CompleteApplied {
					return fmt.Errorf("completion of %s fenced off", items[i].ID)
				}
			}
		}
		return nil
	}); err != nil {
		return scriptsResult{}, err
	}
	st, err := statuses(ctx, e.rdb, prefix, ids)
	if err != nil {
		return scriptsResult{}, err
	}
	r.Succeeded, r.Lost = st["succeeded"], n-st["succeeded"]
	if st["succeeded"] != n {
		return r, fmt.Errorf("%d of %d tasks succeeded: %v", st["succeeded"], n, st)
	}
	return r, nil
}

// evalshaMicros is the time Redis spent in EVALSHA since its stats were last reset (µs).
func (e *benchEnv) evalshaMicros(ctx context.Context) (int64, error) {
	info, err := e.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	v := infoField(info, "cmdstat_evalsha")
	for _, kv := range strings.Split(v, ",") {
		if us, ok := strings.CutPrefix(kv, "usec="); ok {
			return strconv.ParseInt(us, 10, 64)
		}
	}
	return 0, nil // no EVALSHA yet
}

// callgrindDump asks the callgrind running redis-server to dump its counts as name and
// returns the instructions of that dump (its "summary:" line).
func (e *benchEnv) callgrindDump(name string) (int64, error) {
	pid := strconv.Itoa(e.redisPID)
	if out, err := exec.Command("callgrind_control", "--dump="+name, pid).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("callgrind_control --dump: %v: %s", err, out)
	}
	cwd, err := os.Readlink("/proc/" + pid + "/cwd")
	if err != nil {
		return 0, err
	}
	files, _ := filepath.Glob(filepath.Join(cwd, "callgrind.out."+pid+".*"))
	sort.Slice(files, func(i, j int) bool { return dumpSeq(files[i]) > dumpSeq(files[j]) })
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		text := string(b)
		if !strings.Contains(text, "\ndesc: Trigger: dump "+name+"\n") {
			continue
		}
		if s := infoField(strings.ReplaceAll(text, "summary: ", "summary:"), "summary"); s != "" {
			return strconv.ParseInt(s, 10, 64)
		}
	}
	return 0, fmt.Errorf("no callgrind dump %q of pid %s in %s", name, pid, cwd)
}

func dumpSeq(path string) int {
	n, _ := strconv.Atoi(path[strings.LastIndexByte(path, '.')+1:])
	return n
}
