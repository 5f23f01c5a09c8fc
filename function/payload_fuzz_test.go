package function_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/runtime"
)

// The shipped functions decode payloads anyone can enqueue: they never panic, a payload
// that is not their JSON fails at once without retries (runtime.SkipRetry) and says so,
// and with their context already ended they return at once whatever the payload asks.
func FuzzPayloads(f *testing.F) {
	for _, s := range []string{"", `{"ms":5}`, `{"times":2}`, `{"ms":-1}`, `{"ms":1e308}`, `{"ms":"5"}`,
		`{"times":9223372036854775807}`, `[1,2]`, `null`, `{"ms":5`, "\xff\xfe", strings.Repeat(`{"a":`, 1000)} {
		f.Add([]byte(s), int64(1))
	}
	f.Fuzz(func(t *testing.T, payload []byte, attempt int64) {
		done, cancel := context.WithCancel(context.Background())
		cancel()
		for name, fn := range map[string]runtime.Func{"sleep": function.Sleep, "burn": function.Burn, "fail": function.Fail, "echo": function.Echo, "noop": function.Noop} {
			task := &runtime.Task{ID: "t", Function: name, Attempt: attempt, Payload: payload}
			res, err := fn(done, task)
			if name == "echo" && string(res) != string(payload) {
				t.Fatalf("echo returned %q for %q", res, payload)
			}
			if err == nil || name == "echo" || name == "noop" || len(payload) == 0 {
				continue
			}
			var probe map[string]json.RawMessage
			isJSON := json.Unmarshal(payload, &probe) == nil
			if !isJSON && !strings.Contains(err.Error(), "payload is not the expected JSON") && err != context.Canceled {
				t.Fatalf("%s on %q: %v", name, payload, err)
			}
		}
	})
}
