// Package lua holds every Redis script dtq runs, one .lua file each, embedded at
// build time, with one typed Go wrapper per script in the .go file beside it. Each .lua
// file's header lists its KEYS, ARGV and return value. The rules several scripts share
// are written once in prelude.lua and joined to the scripts that call them.
package lua

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
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
	// hash is the SHA1 of the source Redis sees, the name EVALSHA calls the script by:
	// hashed when the binary was built (hashes.go), not at start-up. Joining the
	// prelude and hashing the claim's 40 KB before the first claim cost a worker's
	// start about 45 page faults and the hashing itself.
	hash string
	// full is the source Redis sees, joined on first need: a NOSCRIPT reply (the
	// server's script cache lost it) or Load; fullHash is its SHA1, computed there only
	// when hashes.go does not know the script.
	once     sync.Once
	full     string
	fullHash string
	// kv builds the keys and arguments of a call, or refuses a.
	kv func(a A) ([]string, []any, error)
	// decode reads the reply of a call made with a.
	decode func(a A, cmd *redis.Cmd) (R, error)
	// skip reports that a call with a has nothing to do: no call is made and the
	// zero R is the reply.
	skip func(a A) bool
}

func newScript[A, R any](name string, src source, kv func(A) ([]string, []any, error), decode func(A, *redis.Cmd) (R, error)) *Script[A, R] {
	s := &Script[A, R]{name: name, src: src, hash: hashOf(name), kv: kv, decode: decode}
	every = append(every, s.ref())
	return s
}

// source is a script's body and whether the prelude is joined to it.
type source struct {
	body    string
	prelude bool
}

// plain is a script that calls nothing of the prelude.
func plain(body string) source { return source{body: body} }

// source is the script as Redis sees it, joined on first use.
func (s *Script[A, R]) source() string {
	s.once.Do(func() {
		s.full = s.src.body
		if s.src.prelude {
			s.full = joinPrelude(s.full)
		}
		if s.hash == "" {
			sum := sha1.Sum([]byte(s.full))
			s.fullHash = hex.EncodeToString(sum[:])
		}
	})
	return s.full
}

// sha is the SHA1 EVALSHA names the script by: hashes.go's, or for a script hashes.go
// does not know (a build whose hashes were not regenerated), computed from its source.
func (s *Script[A, R]) sha() string {
	if s.hash != "" {
		return s.hash
	}
	s.source()
	return s.fullHash
}

// run calls the script by EVALSHA, and by EVAL when the server's script cache lacks
// it (Redis restarted or flushed its scripts), which caches it again.
func (s *Script[A, R]) run(ctx context.Context, c redis.Scripter, ks []string, args ...any) *redis.Cmd {
	cmd := c.EvalSha(ctx, s.sha(), ks, args...)
	if IsNoScript(cmd.Err()) {
		return c.Eval(ctx, s.source(), ks, args...)
	}
	return cmd
}

// text is the script's source and the hash its calls name it by.
func (s *Script[A, R]) text() (src, hash string) { return s.source(), s.sha() }

// ref is the script as Load sees it.
func (s *Script[A, R]) ref() scriptRef { return scriptRef{s.name, s.text} }

// scriptRef is a script of any argument and reply types, as Load and the tests see it.
type scriptRef struct {
	name string
	text func() (src, hash string)
}

// loaded reports whether Load loads the script: all but trim_dead.lua (LoadTrimDead)
// and stale.lua (the observer's, only ever Run).
func (r scriptRef) loaded() bool { return r.name != trimDeadName && r.name != staleName }

// load puts the script in the script cache of c, and checks that the cache knows it by
// the hash calls name it by.
func load(ctx context.Context, c redis.Scripter, s scriptRef) error {
	src, hash := s.text()
	got, err := c.ScriptLoad(ctx, src).Result()
	if err != nil {
		return fmt.Errorf("lua: load %s: %w", s.name, err)
	}
	if got != hash {
		return fmt.Errorf("lua: %s is cached as %s, but its calls name %s (hashes.go is stale: go test ./lua -run TestScriptHashes -update)", s.name, got, hash)
	}
	return nil
}

// every lists every script, for Load.
var every []scriptRef

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
	return s.decode(a, s.run(ctx, c, ks, args...))
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
	cmd := p.EvalSha(ctx, s.sha(), ks, args...)
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
	for _, s := range every {
		if !s.loaded() {
			continue
		}
		if err := load(ctx, c, s); err != nil {
			return err
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
