// Command dtq-miniredis is the demo's embedded Redis: miniredis, an in-process Redis,
// with what dtq's scripts need of real Redis that it lacks (embedded.go). `dtq demo`
// starts it when no redis-server is on PATH and DTQ_REDIS_URL is not set, and stops it
// at the end of the run. It is a binary of its own so that dtq, the worker, does not
// link miniredis and its Lua interpreter: their package initialisers ran at every
// start of the worker.
//
// It listens on a free port of 127.0.0.1, prints that address (host:port) as the first
// line on standard output, and serves until SIGTERM or SIGINT.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: dtq-miniredis   (no arguments: prints its address, serves until SIGTERM; dtq demo starts it)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	m, err := startEmbedded()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq-miniredis: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(m.Addr())
	<-ctx.Done()
	m.Close()
}
