package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/dtq/dtq/client"
)

const limitUsage = "limit set --queue Q [--function F] [--rate 100/s] [--burst N] [--concurrency N] | limit list [--queue Q] [--json] | limit remove --queue Q [--function F]"

// runLimit manages rate and concurrency limits: set, list, remove.
func runLimit(args []string) int {
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "set":
		return runLimitSet(args[1:])
	case "list":
		return runLimitList(args[1:])
	case "remove":
		return runLimitRemove(args[1:])
	}
	fs := newFlags("limit", limitUsage, clientEnv())
	if sub == "--help" || sub == "-h" || sub == "-help" {
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return exitOK
	}
	if sub != "" {
		fmt.Fprintf(os.Stderr, "dtq limit: unknown subcommand %q\n", sub)
	}
	fs.SetOutput(os.Stderr)
	fs.Usage()
	return exitUsage
}

func runLimitSet(args []string) int {
	fs := newFlags("limit set", "limit set --queue Q [--function F] [--rate 100/s] [--burst N] [--concurrency N]   (replaces the scope's limit; prints it as JSON)", clientEnv())
	r := addRedisFlags(fs)
	queue := fs.String("queue", "", "queue to limit (required)")
	fn := fs.String("function", "", "limit only this function's tasks (default: the whole queue)")
	rate := fs.String("rate", "", "task starts per period: N/s, N/m, N/h or N/DURATION (5/30s)")
	burst := fs.Int("burst", 0, "starts allowed at once (with --rate; default 1)")
	conc := fs.Int("concurrency", 0, "tasks running at once")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if !noArgs("limit set", fs) {
		return exitUsage
	}
	if *queue == "" {
		fmt.Fprintln(os.Stderr, "dtq limit set: --queue is required")
		return exitUsage
	}
	l := client.Limit{Function: *fn, Burst: *burst, Concurrency: *conc}
	if *rate != "" {
		n, per, err := client.ParseRate(*rate)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dtq limit set: %v\n", err)
			return exitUsage
		}
		l.Rate, l.Per = n, per
	}
	if err := l.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "dtq limit set: %v\n", err)
		return exitUsage
	}
	return withClient("limit set", r, func(ctx context.Context, c *client.Client) error {
		if err := c.SetLimit(ctx, *queue, l); err != nil {
			return err
		}
		ls, err := c.Limits(ctx, *queue)
		if err != nil {
			return err
		}
		for _, li := range ls {
			if li.Function == *fn {
				return printJSON(li)
			}
		}
		return nil
	})
}

// limitRow is a limit as listed, with its queue.
type limitRow struct {
	Queue string `json:"queue"`
	client.LimitInfo
}

func runLimitList(args []string) int {
	fs := newFlags("limit list", "limit list [--queue Q] [--json]   (limits with their current use)", clientEnv())
	r := addRedisFlags(fs)
	queue := fs.String("queue", "", "only this queue (default: every known queue)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if !noArgs("limit list", fs) {
		return exitUsage
	}
	return withClient("limit list", r, func(ctx context.Context, c *client.Client) error {
		qs := []string{*queue}
		if *queue == "" {
			var err error
			if qs, err = c.Queues(ctx); err != nil {
				return err
			}
		}
		rows := []limitRow{}
		for _, q := range qs {
			ls, err := c.Limits(ctx, q)
			if err != nil {
				return err
			}
			for _, li := range ls {
				rows = append(rows, limitRow{Queue: q, LimitInfo: li})
			}
		}
		if *asJSON {
			return printJSON(rows)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "QUEUE\tFUNCTION\tRATE\tBURST\tCONCURRENCY\tRUNNING\tNEXT TOKEN (UTC)")
		for _, row := range rows {
			fn, rate, burst, conc, next := "*", "-", "-", "-", "-"
			if row.Function != "" {
				fn = row.Function
			}
			if row.Rate > 0 {
				rate, burst = fmt.Sprintf("%d/%v", row.Rate, row.Per), fmt.Sprint(row.Burst)
				if row.NextTokenMS > time.Now().UnixMilli() {
					next = time.UnixMilli(row.NextTokenMS).UTC().Format("2006-01-02T15:04:05.000Z")
				} else {
					next = "now"
				}
			}
			if row.Concurrency > 0 {
				conc = fmt.Sprint(row.Concurrency)
			}
			if row.Error != "" {
				rate = "broken: " + quoteOdd(row.Error)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", row.Queue, fn, rate, burst, conc, row.Running, next)
		}
		return tw.Flush()
	})
}

func runLimitRemove(args []string) int {
	fs := newFlags("limit remove", "limit remove --queue Q [--function F]", clientEnv())
	r := addRedisFlags(fs)
	queue := fs.String("queue", "", "queue of the limit (required)")
	fn := fs.String("function", "", "the function's limit (default: the whole queue's)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if !noArgs("limit remove", fs) {
		return exitUsage
	}
	if *queue == "" {
		fmt.Fprintln(os.Stderr, "dtq limit remove: --queue is required")
		return exitUsage
	}
	return withClient("limit remove", r, func(ctx context.Context, c *client.Client) error {
		if err := c.RemoveLimit(ctx, *queue, *fn); err != nil {
			return err
		}
		scope := "the queue"
		if *fn != "" {
			scope = "function " + *fn
		}
		fmt.Printf("%s: limit of %s removed\n", *queue, scope)
		return nil
	})
}
