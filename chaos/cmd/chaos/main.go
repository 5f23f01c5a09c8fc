// Command chaos runs a long chaos run of dtq (chaos.Run) and prints its report: worker
// processes (this binary again) killed, terminated and frozen, and the scheduler leader
// killed, while thousands of tasks flow; with -redis, in-process workers under Redis
// faults instead. It exits 1 when an invariant broke.
//
//	go run ./chaos/cmd/chaos -tasks 20000 -workers 6 -kills 20 -terms 10 -freezes 6 -leader-kills 4
//	go run ./chaos/cmd/chaos -cron -workers 3 -leader-kills 2 -cron-window 60s
//	go run ./chaos/cmd/chaos -redis -tasks 10000 -redis-restarts 5 -conn-cuts 10 -reply-cuts 40 -long-outages 3
//
// Either kind takes the keyspace and client faults too: -bursts, -pauses, -broken-keys, -broken-schedules,
// -registry-deletes.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/dtq/dtq/chaos"
)

func main() {
	chaos.MaybeWorker()
	var o chaos.Options
	redisFaults := flag.Bool("redis", false, "Redis faults with in-process workers instead of process faults")
	flag.IntVar(&o.Workers, "workers", 4, "worker processes")
	flag.IntVar(&o.Concurrency, "concurrency", 8, "DTQ_WORKER_CONCURRENCY of each worker")
	flag.IntVar(&o.Tasks, "tasks", 10000, "tasks")
	flag.DurationVar(&o.EnqueueFor, "enqueue-for", time.Minute, "spread the enqueues over this long")
	flag.DurationVar(&o.FaultEvery, "fault-every", 2*time.Second, "mean gap between faults")
	flag.IntVar(&o.Kills, "kills", 0, "SIGKILLs of random workers")
	flag.IntVar(&o.Terms, "terms", 0, "SIGTERM restarts")
	flag.IntVar(&o.Freezes, "freezes", 0, "SIGSTOPs past the visibility timeout")
	flag.IntVar(&o.LeaderKills, "leader-kills", 0, "SIGKILLs of the scheduler leader")
	flag.IntVar(&o.RedisRestarts, "redis-restarts", 0, "redis-server kill -9 and restart on its AOF")
	flag.IntVar(&o.ConnCuts, "conn-cuts", 0, "drops of every worker connection")
	flag.IntVar(&o.ReplyCuts, "reply-cuts", 0, "replies dropped after Redis ran the command")
	flag.IntVar(&o.Outages, "outages", 0, "Redis unreachable for 0.3-1s")
	flag.IntVar(&o.Delays, "delays", 0, "2s of 5-50ms packet delay")
	flag.IntVar(&o.LongOutages, "long-outages", 0, "Redis unreachable for twice the visibility timeout")
	flag.IntVar(&o.Bursts, "bursts", 0, "EnqueueMany calls over every band of every queue")
	flag.IntVar(&o.Pauses, "pauses", 0, "pauses of a queue for 1-2s (no task of it may start)")
	flag.IntVar(&o.Cancels, "cancels", 0, "cancels of up to three running tasks and one other, racing their completions")
	flag.IntVar(&o.ConcLimit, "conc-limit", 0, "fleet-wide concurrency limit on the first queue and on function sleep of the second, checked from the ledger (0: none)")
	flag.IntVar(&o.BrokenKeys, "broken-keys", 0, "a band stream of one queue made a string for about 1s")
	flag.IntVar(&o.BrokenSchedules, "broken-schedules", 0, "the schedule zset of one queue made a string for about 1s")
	flag.IntVar(&o.RegistryDeletes, "registry-deletes", 0, "deletions of PREFIX:queues (three each)")
	flag.Float64Var(&o.LongShare, "long-share", 0, "share of tasks sleeping 2-3x the visibility timeout (0: 0.02, negative: none)")
	flag.BoolVar(&o.StrictOutages, "strict-outages", false, "fail on re-executions of live workers' tasks after long outages")
	flag.DurationVar(&o.VisibilityTimeout, "visibility", 3*time.Second, "DTQ_VISIBILITY_TIMEOUT_S")
	flag.DurationVar(&o.Deadline, "deadline", 5*time.Minute, "longest wait for every task to end, after the last fault, enqueue and due time")
	flag.Uint64Var(&o.Seed, "seed", 0, "random seed (0: random)")
	flag.StringVar(&o.Dir, "dir", "", "ledger, logs, AOF and report.json directory (default: temporary)")
	asJSON := flag.Bool("json", false, "print the report as JSON")
	cron := flag.Bool("cron", false, "instead: a periodic entry fired while the scheduler leader is killed (-workers, -leader-kills, -cron-window)")
	cronWindow := flag.Duration("cron-window", time.Minute, "with -cron: the window of 1 s ticks counted")
	flag.Parse()
	if *cron {
		os.Exit(runCron(*cronWindow, o.Workers, o.LeaderKills, o.Dir))
	}
	o.InProcess = *redisFaults
	o.Log = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := chaos.Run(ctx, o)
	if o.Dir != "" {
		// the report with its fault log beside the ledger, for a later look
		if b, err := json.MarshalIndent(rep, "", "  "); err == nil {
			_ = os.WriteFile(filepath.Join(o.Dir, "report.json"), b, 0o644)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		fmt.Print(rep.String())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// runCron runs chaos.RunCron and prints its report; it returns the exit code.
func runCron(window time.Duration, workers, leaderKills int, dir string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := chaos.RunCron(ctx, chaos.CronOptions{Workers: workers, Window: window, LeaderKills: leaderKills, Dir: dir, Log: os.Stderr})
	fmt.Println(rep.String())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
