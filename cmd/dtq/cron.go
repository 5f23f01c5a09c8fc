package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/dtq/dtq/client"
)

const cronUsage = "cron add --name N --spec S --queue Q --function F [flags] | cron list [--json] | cron remove|pause|resume NAME"

// runCron manages periodic entries: add, list, remove, pause, resume.
func runCron(args []string) int {
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "add":
		return runCronAdd(args[1:])
	case "list":
		return runCronList(args[1:])
	case "remove", "pause", "resume":
		return runCronName(sub, args[1:])
	}
	fs := newFlags("cron", cronUsage, clientEnv())
	if sub == "--help" || sub == "-h" || sub == "-help" {
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return exitOK
	}
	if sub != "" {
		fmt.Fprintf(os.Stderr, "dtq cron: unknown subcommand %q\n", sub)
	}
	fs.SetOutput(os.Stderr)
	fs.Usage()
	return exitUsage
}

func runCronAdd(args []string) int {
	fs := newFlags("cron add", "cron add --name N --spec S --queue Q --function F [flags]   (prints the entry as JSON)", clientEnv())
	r := addRedisFlags(fs)
	name := fs.String("name", "", "entry name [A-Za-z0-9_.-]{1,64} (required)")
	spec := fs.String("spec", "", `schedule: five cron fields ("*/5 * * * *"), @hourly, @daily, @every 30s…, optionally after "CRON_TZ=Zone " (UTC otherwise) (required)`)
	queue := fs.String("queue", "default", "queue of its tasks")
	fn := fs.String("function", "", "function its tasks run (required)")
	payload := fs.String("payload", "", "payload of its tasks")
	prio := fs.Int("priority", 0, "priority 0..9 of its tasks")
	retries := fs.Int("max-retries", -1, "retries of its tasks (-1: the function's default)")
	timeout := fs.Duration("timeout", 0, "time limit of one attempt (0: the function's default)")
	unique := fs.String("unique", "", "unique key of its tasks: a tick while the last one is queued or running adds none")
	missed := fs.String("missed", "once", "ticks missed while no worker ran: once (run once on wake) or skip")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if !noArgs("cron add", fs) {
		return exitUsage
	}
	for flag, v := range map[string]string{"name": *name, "spec": *spec, "function": *fn} {
		if v == "" {
			fmt.Fprintf(os.Stderr, "dtq cron add: --%s is required\n", flag)
			return exitUsage
		}
	}
	e := client.CronEntry{Name: *name, Spec: *spec, Queue: *queue, Function: *fn, Payload: *payload,
		Priority: *prio, TimeoutMS: timeout.Milliseconds(), Unique: *unique, Missed: client.MissedPolicy(*missed)}
	if *retries >= 0 {
		e.MaxRetries = client.Retries(*retries)
	}
	return withClient("cron add", r, func(ctx context.Context, c *client.Client) error {
		ci, err := c.AddCron(ctx, e)
		if err != nil {
			return err
		}
		return printJSON(ci)
	})
}

func runCronList(args []string) int {
	fs := newFlags("cron list", "cron list [--json]   (every entry with its next tick)", clientEnv())
	r := addRedisFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if !noArgs("cron list", fs) {
		return exitUsage
	}
	return withClient("cron list", r, func(ctx context.Context, c *client.Client) error {
		ls, err := c.CronList(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(ls)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSPEC\tQUEUE\tFUNCTION\tMISSED\tSTATE\tNEXT (UTC)")
		for _, ci := range ls {
			state, next := "active", "-"
			switch {
			case ci.Error != "":
				state = "broken"
			case ci.Paused:
				state = "paused"
			case ci.NextMS > 0:
				next = time.UnixMilli(ci.NextMS).UTC().Format(time.RFC3339)
			}
			// %q: names and specs are data, printed quoted when they hold anything odd
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ci.Name, quoteOdd(ci.Spec), ci.Queue, quoteOdd(ci.Function), ci.Missed, state, next)
		}
		return tw.Flush()
	})
}

// quoteOdd quotes s when it holds a tab, a newline or another control byte.
func quoteOdd(s string) string {
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}

func runCronName(sub string, args []string) int {
	fs := newFlags("cron "+sub, "cron "+sub+" NAME", clientEnv())
	r := addRedisFlags(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(os.Stderr, "dtq cron %s: want one entry name\n", sub)
		return exitUsage
	}
	name := fs.Arg(0)
	return withClient("cron "+sub, r, func(ctx context.Context, c *client.Client) error {
		op := map[string]func(context.Context, string) error{"remove": c.RemoveCron, "pause": c.PauseCron, "resume": c.ResumeCron}[sub]
		if err := op(ctx, name); err != nil {
			return err
		}
		fmt.Printf("%s: %sd\n", name, sub)
		return nil
	})
}
