package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/dtq/dtq/client"
)

// withClient opens Redis and runs fn with a client and a bounded context.
func withClient(cmd string, r *redisFlags, fn func(ctx context.Context, c *client.Client) error) int {
	limit, err := payloadLimit()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq %s: %v\n", cmd, err)
		return exitUsage
	}
	rdb, err := r.open()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq %s: %s: %v\n", cmd, r.source(err), err)
		return exitUsage
	}
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := fn(ctx, client.New(rdb, client.Options{Prefix: r.prefix, MaxPayload: limit})); err != nil {
		if errors.Is(err, client.ErrInvalid) || errors.Is(err, client.ErrPayloadTooBig) {
			fmt.Fprintf(os.Stderr, "dtq %s: %v\n", cmd, err)
			return exitUsage
		}
		return fail(cmd, err)
	}
	return exitOK
}

// payloadLimit is DTQ_MAX_PAYLOAD_BYTES, the limit the workers apply too.
func payloadLimit() (int, error) {
	v := envDefault("DTQ_MAX_PAYLOAD_BYTES", strconv.Itoa(client.DefaultMaxPayload))
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("DTQ_MAX_PAYLOAD_BYTES: %q is not a positive number of bytes", v)
	}
	return n, nil
}

// readPayload reads the payload of --payload-file: a file, or standard input for "-".
// It reads at most one byte over limit, so an oversized file is refused unread.
func readPayload(path string, stdin io.Reader, limit int) ([]byte, error) {
	name := path
	var r io.Reader = stdin
	if path == "-" {
		name = "standard input"
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("--payload-file: %w", err)
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.IsDir() {
			return nil, fmt.Errorf("--payload-file: %s is a directory", path)
		} else if err == nil && st.Mode().IsRegular() && st.Size() > int64(limit) {
			return nil, fmt.Errorf("--payload-file: %s is %d bytes, over the payload limit of %d (DTQ_MAX_PAYLOAD_BYTES)", path, st.Size(), limit)
		}
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("--payload-file: read %s: %w", name, err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("--payload-file: %s holds over %d bytes, the payload limit (DTQ_MAX_PAYLOAD_BYTES)", name, limit)
	}
	return b, nil
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runEnqueue(args []string) int {
	fs := newFlags("enqueue", "enqueue --queue Q --function F [flags]   (prints the task id)", clientEnv())
	r := addRedisFlags(fs)
	queue := fs.String("queue", "default", "queue name")
	fn := fs.String("function", "", "function to run (required)")
	prio := fs.Int("priority", 0, "priority 0..9 (9 most urgent)")
	payload := fs.String("payload", "", "payload (JSON by convention); a large one: --payload-file")
	payloadFile := fs.String("payload-file", "", "read the payload from this file, or from standard input for -")
	delay := fs.Duration("delay", 0, "run after this delay (e.g. 5s)")
	runAt := fs.String("run-at", "", "run at this time (RFC 3339)")
	retries := fs.Int("max-retries", -1, "failed attempts retried before the task is dead (-1: the function's default)")
	timeout := fs.Duration("timeout", 0, "time limit of one attempt (0: the function's default)")
	unique := fs.String("unique", "", "unique key: a second enqueue with it returns the first task's id")
	reuse := fs.Bool("unique-reuse", false, "with --unique: when the task holding the key is dead or cancelled, create a new task and pass the key to it")
	id := fs.String("id", "", "explicit task id (default: generated)")
	wait := fs.Bool("wait", false, "wait for the task to end, print its final record as JSON; exit 1 unless it succeeded")
	waitFor := fs.Duration("wait-timeout", 0, "with --wait: give up after this long (0: "+maxWait.String()+", the most)")
	traceContext := traceFlags(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if !noArgs("enqueue", fs) {
		return exitUsage
	}
	if *waitFor < 0 || *waitFor > maxWait {
		fmt.Fprintf(os.Stderr, "dtq enqueue: --wait-timeout %v is out of range 0..%v\n", *waitFor, maxWait)
		return exitUsage
	}
	if *waitFor == 0 {
		*waitFor = maxWait
	}
	tp, ts := traceContext()
	tctx, err := withTraceparent(context.Background(), tp, ts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq enqueue: %v\n", err)
		return exitUsage
	}
	if *fn == "" {
		fmt.Fprintln(os.Stderr, "dtq enqueue: --function is required")
		return exitUsage
	}
	body := []byte(*payload)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["payload-file"] {
		if set["payload"] {
			fmt.Fprintln(os.Stderr, "dtq enqueue: --payload and --payload-file exclude each other: give one")
			return exitUsage
		}
		if *payloadFile == "" {
			fmt.Fprintln(os.Stderr, "dtq enqueue: --payload-file needs a path, or - for standard input")
			return exitUsage
		}
		limit, err := payloadLimit()
		if err != nil {
			fmt.Fprintf(os.Stderr, "dtq enqueue: %v\n", err)
			return exitUsage
		}
		if body, err = readPayload(*payloadFile, os.Stdin, limit); err != nil {
			fmt.Fprintf(os.Stderr, "dtq enqueue: %v\n", err)
			return exitUsage
		}
	}
	t := client.Task{Queue: *queue, Function: *fn, Payload: body, Priority: *prio,
		Delay: *delay, Timeout: *timeout, Unique: *unique, ReuseUnique: *reuse, ID: *id}
	if *retries >= 0 {
		t.MaxRetries = client.Retries(*retries)
	}
	if *runAt != "" {
		at, err := time.Parse(time.RFC3339, *runAt)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dtq enqueue: --run-at %q is not RFC 3339\n", *runAt)
			return exitUsage
		}
		t.RunAt = at
	}
	return withClient("enqueue", r, func(ctx context.Context, c *client.Client) error {
		rs, err := c.EnqueueMany(trace.ContextWithRemoteSpanContext(ctx, trace.SpanContextFromContext(tctx)), []client.Task{t})
		if err != nil {
			return err
		}
		if rs[0].Err != nil {
			return rs[0].Err
		}
		fmt.Println(rs[0].ID)
		if !rs[0].Created {
			hint := ""
			if rs[0].HolderStatus == client.StatusDead || rs[0].HolderStatus == client.StatusCancelled {
				hint = " (--unique-reuse passes the key of a dead or cancelled task to a new one)"
			}
			fmt.Fprintf(os.Stderr, "dtq enqueue: unique key %q is taken by task %s (%s); nothing created%s\n", *unique, rs[0].ID, rs[0].HolderStatus, hint)
		}
		if !*wait {
			return nil
		}
		return waitAndPrint(c, *queue, rs[0].ID, *waitFor)
	})
}

// maxWait bounds dtq enqueue --wait.
const maxWait = 24 * time.Hour

// errNotSucceeded: the awaited task ended dead or cancelled (exit 1, the record printed).
var errNotSucceeded = errors.New("the task did not succeed")

// waitAndPrint waits for the task to end (client.Wait, woken by a push), at most d or
// until SIGINT/SIGTERM, and prints its final record.
func waitAndPrint(c *client.Client, queue, id string, d time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	ti, err := c.Wait(ctx, queue, id)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("task %s had not ended after %v", id, d)
	}
	if err != nil {
		return err
	}
	if err := printJSON(ti); err != nil {
		return err
	}
	if ti.Status != client.StatusSucceeded {
		return fmt.Errorf("task %s ended %s: %w", id, ti.Status, errNotSucceeded)
	}
	return nil
}

func runInspect(args []string) int {
	fs := newFlags("inspect", "inspect task --queue Q ID | inspect queue Q | inspect queues", clientEnv())
	if len(args) == 0 || (args[0] != "task" && args[0] != "queue" && args[0] != "queues") {
		if len(args) > 0 && (args[0] == "--help" || args[0] == "-h") {
			fs.SetOutput(os.Stdout)
			fs.Usage()
			return exitOK
		}
		fs.SetOutput(os.Stderr)
		fs.Usage()
		return exitUsage
	}
	what := args[0]
	fs = newFlags("inspect "+what, map[string]string{"task": "inspect task --queue Q ID", "queue": "inspect queue Q", "queues": "inspect queues"}[what], clientEnv())
	r := addRedisFlags(fs)
	queue := fs.String("queue", "default", "queue of the task")
	if code, ok := parse(fs, args[1:]); !ok {
		return code
	}
	switch what {
	case "task":
		if fs.NArg() != 1 {
			fmt.Fprintln(os.Stderr, "dtq inspect task: want one task id")
			return exitUsage
		}
		return withClient("inspect", r, func(ctx context.Context, c *client.Client) error {
			ti, err := c.Get(ctx, *queue, fs.Arg(0))
			if err != nil {
				return err
			}
			return printJSON(ti)
		})
	case "queue":
		name := *queue
		if fs.NArg() == 1 {
			name = fs.Arg(0)
		} else if fs.NArg() > 1 {
			fmt.Fprintln(os.Stderr, "dtq inspect queue: want one queue name")
			return exitUsage
		}
		return withClient("inspect", r, func(ctx context.Context, c *client.Client) error {
			qi, err := c.Queue(ctx, name)
			if err != nil {
				return err
			}
			return printJSON(qi)
		})
	default:
		if !noArgs("inspect queues", fs) {
			return exitUsage
		}
		return withClient("inspect", r, func(ctx context.Context, c *client.Client) error {
			names, err := c.Queues(ctx)
			if err != nil {
				return err
			}
			out := []*client.QueueInfo{}
			for _, n := range names {
				qi, err := c.Queue(ctx, n)
				if err != nil {
					return err
				}
				out = append(out, qi)
			}
			return printJSON(out)
		})
	}
}

func runCancel(args []string) int {
	fs := newFlags("cancel", "cancel --queue Q ID...", clientEnv())
	r := addRedisFlags(fs)
	queue := fs.String("queue", "default", "queue of the tasks")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "dtq cancel: want at least one task id")
		return exitUsage
	}
	return withClient("cancel", r, func(ctx context.Context, c *client.Client) error {
		var errs []error
		for _, id := range fs.Args() {
			out, err := c.CancelTask(ctx, *queue, id)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Println(id, out)
		}
		return errors.Join(errs...)
	})
}

func queueArg(cmd string, fs *flag.FlagSet) (string, bool) {
	if fs.NArg() != 1 {
		fmt.Fprintf(os.Stderr, "dtq %s: want one queue name\n", cmd)
		return "", false
	}
	return fs.Arg(0), true
}

func runPause(args []string) int {
	fs := newFlags("pause", "pause Q", clientEnv())
	r := addRedisFlags(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	q, ok := queueArg("pause", fs)
	if !ok {
		return exitUsage
	}
	return withClient("pause", r, func(ctx context.Context, c *client.Client) error { return c.Pause(ctx, q) })
}

func runResume(args []string) int {
	fs := newFlags("resume", "resume Q", clientEnv())
	r := addRedisFlags(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	q, ok := queueArg("resume", fs)
	if !ok {
		return exitUsage
	}
	return withClient("resume", r, func(ctx context.Context, c *client.Client) error { return c.Resume(ctx, q) })
}

func runDead(args []string) int {
	usages := map[string]string{
		"list":    "dead list --queue Q [--limit N]",
		"requeue": "dead requeue --queue Q ID... | dead requeue --queue Q --all",
		"delete":  "dead delete --queue Q ID... | dead delete --queue Q --all",
	}
	if len(args) == 0 || usages[args[0]] == "" {
		fs := newFlags("dead", "dead list --queue Q [--limit N] | dead requeue --queue Q (ID... | --all) | dead delete --queue Q (ID... | --all)", clientEnv())
		if len(args) > 0 && (args[0] == "--help" || args[0] == "-h") {
			fs.SetOutput(os.Stdout)
			fs.Usage()
			return exitOK
		}
		fs.SetOutput(os.Stderr)
		fs.Usage()
		return exitUsage
	}
	what := args[0]
	fs := newFlags("dead "+what, usages[what], clientEnv())
	r := addRedisFlags(fs)
	queue := fs.String("queue", "default", "queue")
	limit := fs.Int("limit", 100, "list: most tasks to list")
	all := fs.Bool("all", false, "requeue, delete: every task dead now, in batches (prints a JSON summary)")
	if code, ok := parse(fs, args[1:]); !ok {
		return code
	}
	switch {
	case what == "list":
		if !noArgs("dead list", fs) {
			return exitUsage
		}
		return withClient("dead", r, func(ctx context.Context, c *client.Client) error {
			ts, err := c.Dead(ctx, *queue, *limit)
			if err != nil {
				return err
			}
			return printJSON(ts)
		})
	case *all && fs.NArg() > 0, !*all && fs.NArg() == 0:
		fmt.Fprintf(os.Stderr, "dtq dead %s: want task ids or --all, not both\n", what)
		return exitUsage
	case *all:
		return withClient("dead", r, func(ctx context.Context, c *client.Client) error {
			act := c.DeleteAllDead
			if what == "requeue" {
				act = c.RequeueAllDead
			}
			res, err := act(ctx, *queue)
			if res != nil {
				if perr := printJSON(res); perr != nil && err == nil {
					err = perr
				}
			}
			return err
		})
	case what == "delete":
		return withClient("dead", r, func(ctx context.Context, c *client.Client) error {
			res, err := c.DeleteDead(ctx, *queue, fs.Args())
			if res != nil {
				if perr := printJSON(res); perr != nil && err == nil {
					err = perr
				}
			}
			if err == nil && len(res.NotFound) > 0 {
				err = fmt.Errorf("%d of %d: %w", len(res.NotFound), fs.NArg(), client.ErrNotFound)
			}
			return err
		})
	}
	return withClient("dead", r, func(ctx context.Context, c *client.Client) error {
		var errs []error
		for _, id := range fs.Args() {
			if err := c.Requeue(ctx, *queue, id); err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Println(id)
		}
		return errors.Join(errs...)
	})
}

func runRunNow(args []string) int {
	fs := newFlags("run-now", "run-now --queue Q ID...   (a scheduled or retrying task goes on its stream now)", clientEnv())
	r := addRedisFlags(fs)
	queue := fs.String("queue", "default", "queue of the tasks")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "dtq run-now: want at least one task id")
		return exitUsage
	}
	return withClient("run-now", r, func(ctx context.Context, c *client.Client) error {
		var errs []error
		for _, id := range fs.Args() {
			if err := c.RunNow(ctx, *queue, id); err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Println(id)
		}
		return errors.Join(errs...)
	})
}

func runWorkers(args []string) int {
	fs := newFlags("workers", "workers   (JSON, liveness computed from heartbeat age)", clientEnv())
	r := addRedisFlags(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if !noArgs("workers", fs) {
		return exitUsage
	}
	return withClient("workers", r, func(ctx context.Context, c *client.Client) error {
		ws, err := c.Workers(ctx)
		if err != nil {
			return err
		}
		if ws == nil {
			return printJSON([]any{})
		}
		return printJSON(ws)
	})
}
