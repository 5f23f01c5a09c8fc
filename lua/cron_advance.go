package lua

import (
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

//go:embed cron_advance.lua
var cronAdvanceSrc string

// CronAdvance moves a periodic entry of a queue from the tick it handled to its next
// tick, only while the entry still waits for the tick handled (cron_advance.lua); it
// replies whether it did.
var CronAdvance = newScript("cron_advance.lua", plain(cronAdvanceSrc), cronAdvanceKV,
	func(_ CronAdvanceArgs, cmd *redis.Cmd) (bool, error) {
		n, err := cmd.Int64()
		if err != nil {
			return false, fmt.Errorf("cron advance: %w", err)
		}
		return n == 1, nil
	})

// CronAdvanceArgs is one advance: entry Name of Queue from tick TickMS to NextMS
// (Remove instead takes the entry out of the queue's zset).
type CronAdvanceArgs struct {
	Queue  keys.Queue
	Name   string
	TickMS int64
	NextMS int64
	Remove bool
}

func cronAdvanceKV(a CronAdvanceArgs) ([]string, []any, error) {
	if err := keys.ValidCronName(a.Name); err != nil {
		return nil, nil, fmt.Errorf("cron advance: %w", err)
	}
	next := "-"
	if !a.Remove {
		if a.NextMS <= a.TickMS {
			return nil, nil, fmt.Errorf("cron advance: next tick %d is not after tick %d", a.NextMS, a.TickMS)
		}
		next = strconv.FormatInt(a.NextMS, 10)
	}
	return []string{a.Queue.Cron()}, []any{a.Name, a.TickMS, next}, nil
}
