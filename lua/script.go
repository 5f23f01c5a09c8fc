// Package lua holds every Redis script dtq runs, one .lua file each, embedded at
// build time, with one typed Go wrapper per script in the .go file beside it. Each .lua
// file's header lists its KEYS, ARGV and return value. The rules several scripts share
// are written once in prelude.lua and joined to the scripts that call them.
package lua

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Script is one Redis script with its typed arguments A and decoded reply R. Run calls
// it (EVALSHA, falling back to EVAL when the server's script cache lacks it); Queue
// adds it to a pipeline (EVALSHA only: call Load first, and again on NOSCRIPT).
type Script[A, R any] struct {
	name string
	src  source
	// script is built from src on first use, not at start-up: joining the prelude and
	// hashing every script would cost each process's start about half a millisecond
	// before it could claim anything.
	once   sync.Once
	script *redis.Script
	// kv builds the keys and arguments of a call, or refuses a.
	kv func(a A) ([]string, []any, error)
	// decode reads the reply of a call made with a.
	decode func(a A, cmd *redis.Cmd) (R, error)
	// skip reports that a call with a has nothing to do: no call is made and the
	// zero R is the reply.
	skip func(a A) bool
}

func newScript[A, R any](name string, src source, kv func(A) ([]string, []any, error), decode func(A, *redis.Cmd) (R, error)) *Script[A, R] {
	s := &Script[A, R]{name: name, src: src, kv: kv, decode: decode}
	if name != trimDeadName && name != staleName {
		all = append(all, s.redis)
	}
	return s
}

// source is a script's body and whether the prelude is joined to it.
type source struct {
	body    string
	prelude bool
}

// plain is a script that calls nothing of the prelude.
func plain(body string) source { return source{body: body} }

// redis is the go-redis script, built on first use.
func (s *Script[A, R]) redis() *redis.Script {
	s.once.Do(func() {
		src := s.src.body
		if s.src.prelude {
			src = joinPrelude(src)
		}
		s.script = redis.NewScript(src)
	})
	return s.script
}

// all lists the scripts Load loads.
var all []func() *redis.Script

// Name is the script's file name.
func (s *Script[A, R]) Name() string { return s.name }

// Run calls the script with a on c and decodes its reply.
func (s *Script[A, R]) Run(ctx context.Context, c redis.Scripter, a A) (R, error) {
	if s.skip != nil && s.skip(a) {
		var zero R
		return zero, nil
	}
	ks, args, err := s.kv(a)
	if err != nil {
		var zero R
		return zero, err
	}
	return s.decode(a, s.redis().Run(ctx, c, ks, args...))
}

// Queue adds a call of the script with a to p, by EVALSHA; its Pending's Result decodes
// the reply once p has run.
func (s *Script[A, R]) Queue(ctx context.Context, p redis.Pipeliner, a A) *Pending[R] {
	if s.skip != nil && s.skip(a) {
		return &Pending[R]{}
	}
	ks, args, err := s.kv(a)
	if err != nil {
		return &Pending[R]{err: err}
	}
	cmd := s.redis().EvalSha(ctx, p, ks, args...)
	return &Pending[R]{cmd: cmd, decode: func(cmd *redis.Cmd) (R, error) { return s.decode(a, cmd) }}
}

// Pending is a script call queued on a pipeline.
type Pending[R any] struct {
	cmd    *redis.Cmd
	err    error // the call was refused before it was queued
	decode func(*redis.Cmd) (R, error)
}

// Err is the call's error as Redis or the client reported it (IsNoScript tells a lost
// script cache), or the refusal of its arguments.
func (p *Pending[R]) Err() error {
	if p.err != nil {
		return p.err
	}
	if p.cmd == nil {
		return nil
	}
	return p.cmd.Err()
}

// Result decodes the reply, once the pipeline ran.
func (p *Pending[R]) Result() (R, error) {
	var zero R
	if p.err != nil {
		return zero, p.err
	}
	if p.cmd == nil {
		return zero, nil
	}
	return p.decode(p.cmd)
}

// Load loads every script but trim_dead.lua (LoadTrimDead) and stale.lua (the
// observer's, only ever Run) into the script cache of c, so that pipelined EVALSHA
// calls find them. Script.Run falls back to EVAL by itself; pipelines do not.
func Load(ctx context.Context, c redis.Scripter) error {
	for _, s := range all {
		if err := s().Load(ctx, c).Err(); err != nil {
			return fmt.Errorf("lua: load script: %w", err)
		}
	}
	return nil
}

// IsNoScript reports whether err says the script cache lost a script (Redis restarted).
func IsNoScript(err error) bool {
	return redis.HasErrorPrefix(err, "NOSCRIPT")
}

// withPrelude joins to a script's body the definitions of the shared prelude
// (prelude.lua) that it calls: Redis sees one script. Every call of a script runs its
// definitions anew, so a script gets only those it uses. The body's header (KEYS, ARGV,
// reply) stays at the top of its own file.
func withPrelude(body string) source { return source{body: body, prelude: true} }

// joinPrelude is the source Redis sees of a script that calls the prelude.
func joinPrelude(body string) string {
	var b strings.Builder
	for _, block := range strings.Split(prelude, "\n\n") {
		_, rest, ok := strings.Cut("\n"+block, "\nlocal function ")
		if !ok {
			continue // the file's own comment
		}
		name, _, _ := strings.Cut(rest, "(")
		if strings.Contains(body, name+"(") {
			b.WriteString(block)
			b.WriteString("\n")
		}
	}
	b.WriteString(body)
	return b.String()
}

// Errors a script's return codes map to.
var (
	ErrTaskExists  = errors.New("a task with this id exists already")
	ErrNotFound    = errors.New("no such task")
	ErrWrongStatus = errors.New("task is not in a state that allows this")
)

// Lifetimes of keys the scripts write, passed to them as arguments: written here only.
const (
	// ReceiptTTL: a claim's receipt (claim.lua), which answers the same call resent after
	// its reply was lost.
	ReceiptTTL = time.Minute
	// InboxTTL: how long a worker's inbox outlives its last registration for a hand-off
	// (claim.lua); the worker renews it as it blocks on it.
	InboxTTL = 10 * time.Minute
	// LeftTTL: how long a leaving process's marker keeps its claims still in flight from
	// registering it again (leave.lua).
	LeftTTL = time.Minute
	// ThroughputTTL: how long a queue's hour of per-minute completion counts
	// (PREFIX:{Q}:tp:HOUR, complete.lua) outlives its newest counted minute.
	ThroughputTTL = 24 * time.Hour
)

// Limits the scripts apply, passed to them as arguments: written here only.
const (
	// MaxEntryTaskID is the longest task id claim.lua takes from a stream entry; a
	// longer one is refused as malformed. It is above client.ValidID's 128, so that an
	// entry a producer wrote by hand is judged by the claim and not lost.
	MaxEntryTaskID = 200
	// LapsedPerCall is how many lapsed hand-off registrations (workers gone without
	// leaving) one read-mode claim removes from the waiting set.
	LapsedPerCall = 8
	// RescueRowsPerNote is how many unread inbox rows one rescued note takes back at
	// most (the rows before it are as stale as it is).
	RescueRowsPerNote = 100
	// SucceededKept is about how many recently succeeded tasks a queue's succeeded list
	// keeps: complete.lua pushes one entry a call of its n successes and cuts the list
	// to ceil(SucceededKept / n) entries, so at most SucceededKept entries.
	SucceededKept = 1000
	// DeadBatch is the most dead tasks one call of dead_requeue.lua or dead_delete.lua
	// acts on, so that Redis is never blocked long: acting on all of them is many calls.
	DeadBatch = 500
)

// None is the reply of a script whose outcome is its error alone.
type None struct{}

//go:embed prelude.lua
var prelude string

// NoScript reports whether the call failed because the script cache lacked the script
// (Redis restarted): load the scripts and call again.
func (p *Pending[R]) NoScript() bool { return IsNoScript(p.Err()) }
