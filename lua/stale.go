package lua

import (
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed stale.lua
var staleSrc string

// Stale is the observers' compare-and-emit of WORKER_STALE for one worker
// (stale.lua): it publishes the event when the worker's record is still the one judged
// and no observer published for it yet, and keeps the marker that says so.
//
// Its keys are outside any queue and in several cluster slots: it runs on a single
// node (or a sentinel's master), not on Redis Cluster.
var Stale = newScript(staleName, plain(staleSrc), staleKV, decodeStale)

// staleName: the workers do not load it (Load).
const staleName = "stale.lua"

// StaleMarkTTL is how long a marker of stale.lua outlives the last call that found the
// worker's record expired: a watcher renews it on every pass while the id is in the
// workers set, so an id is published once however long it stays there.
const StaleMarkTTL = 24 * time.Hour

// Judgement is what a stale watcher judged of a worker's record.
type Judgement string

// Judgements.
const (
	JudgedLive    Judgement = "live"
	JudgedStale   Judgement = "stale"
	JudgedStopped Judgement = "stopped"
	JudgedExpired Judgement = "expired" // no record: it expired
)

// StaleArgs is one call of Stale.
type StaleArgs struct {
	Record, Mark, Events string // the worker's hash, its marker, the events stream
	Worker               string
	Judged               Judgement
	// Heartbeat is the record's last_heartbeat field as read ("" for JudgedExpired).
	Heartbeat string
	NowMS     int64
	MaxLen    int64 // MAXLEN ~ of the events stream, > 0
	Detail    string
}

// StaleOutcome is the reply of Stale.
type StaleOutcome int

// Outcomes.
const (
	StaleMoved     StaleOutcome = -1 // the record is no longer the one judged
	StaleNothing   StaleOutcome = 0  // nothing to publish
	StalePublished StaleOutcome = 1
)

func staleKV(a StaleArgs) ([]string, []any, error) {
	switch a.Judged {
	case JudgedLive, JudgedStale, JudgedStopped, JudgedExpired:
	default:
		return nil, nil, fmt.Errorf("stale %s: unknown judgement %q", a.Worker, a.Judged)
	}
	if a.MaxLen <= 0 {
		return nil, nil, fmt.Errorf("stale %s: events MAXLEN %d must be positive", a.Worker, a.MaxLen)
	}
	return []string{a.Record, a.Mark, a.Events},
		[]any{string(a.Judged), a.Worker, a.Heartbeat, a.NowMS, a.MaxLen, a.Detail, StaleMarkTTL.Milliseconds()}, nil
}

func decodeStale(a StaleArgs, cmd *redis.Cmd) (StaleOutcome, error) {
	n, err := cmd.Int64()
	if err != nil {
		return 0, fmt.Errorf("stale %s: %w", a.Worker, err)
	}
	return StaleOutcome(n), nil
}
