package runtime_test

import (
	"fmt"
	"time"

	"github.com/dtq/dtq/runtime"
)

// A program embedding the worker builds its Config in Go: the fields it sets, the
// defaults for the rest, and after WithDefaults any zero that is a setting of its own.
func ExampleConfig_WithDefaults() {
	cfg := runtime.Config{Queues: []string{"emails"}, Concurrency: 4, VisibilityTimeout: time.Minute}.WithDefaults()
	cfg.ResultTTL = 0 // keep finished records forever
	fmt.Println(cfg.Validate(), cfg.Queues, cfg.Concurrency, cfg.VisibilityTimeout, cfg.HeartbeatInterval, cfg.PollBlock, cfg.ResultTTL)
	// Output: <nil> [emails] 4 1m0s 5s 30s 0s
}
