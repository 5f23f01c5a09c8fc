package python_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/redistest"
)

// str is a string of the bad-input table: a JSON string, {"hex": "..."} (raw bytes) or
// {"repeat": s, "times": n}.
type str string

func (s *str) UnmarshalJSON(b []byte) error {
	var plain string
	if err := json.Unmarshal(b, &plain); err == nil {
		*s = str(plain)
		return nil
	}
	var o struct {
		Hex    *string `json:"hex"`
		Repeat *string `json:"repeat"`
		Times  int     `json:"times"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	switch {
	case o.Hex != nil:
		raw, err := hex.DecodeString(*o.Hex)
		*s = str(raw)
		return err
	case o.Repeat != nil:
		*s = str(strings.Repeat(*o.Repeat, o.Times))
		return nil
	}
	return fmt.Errorf("a string must be text, {hex} or {repeat, times}: %s", b)
}

type badCase struct {
	Name   string `json:"name"`
	Op     string `json:"op"`
	Client struct {
		MaxPayload int `json:"max_payload"`
	} `json:"client"`
	Task struct {
		Queue      str  `json:"queue"`
		Function   str  `json:"function"`
		Payload    str  `json:"payload"`
		Priority   int  `json:"priority"`
		DelayMS    int  `json:"delay_ms"`
		TimeoutMS  int  `json:"timeout_ms"`
		MaxRetries *int `json:"max_retries"`
		Unique     str  `json:"unique"`
		ID         str  `json:"id"`
	} `json:"task"`
	Queue str     `json:"queue"`
	ID    str     `json:"id"`
	Error *string `json:"error"`
	Kind  *string `json:"kind"`
}

func (c *badCase) task() client.Task {
	t := c.Task
	return client.Task{Queue: string(t.Queue), Function: string(t.Function), Payload: []byte(t.Payload),
		Priority: t.Priority, Delay: time.Duration(t.DelayMS) * time.Millisecond,
		Timeout: time.Duration(t.TimeoutMS) * time.Millisecond, MaxRetries: t.MaxRetries,
		Unique: string(t.Unique), ID: string(t.ID)}
}

func loadBadInputs(t *testing.T) []badCase {
	t.Helper()
	b, err := os.ReadFile("testdata/bad_inputs.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []badCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("bad_inputs.json: %v", err)
	}
	if len(doc.Cases) < 40 {
		t.Fatalf("bad_inputs.json holds %d cases: the test would check little", len(doc.Cases))
	}
	return doc.Cases
}

var kinds = map[string]error{"invalid": client.ErrInvalid, "payload_too_big": client.ErrPayloadTooBig,
	"not_found": client.ErrNotFound}

// checkErr compares err with the case's expected message and kind.
func checkErr(t *testing.T, c *badCase, err error) {
	t.Helper()
	if c.Error == nil {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("accepted; want %q", *c.Error)
	}
	if err.Error() != *c.Error {
		t.Errorf("error\n got %q\nwant %q", err.Error(), *c.Error)
	}
	if want := kinds[*c.Kind]; !errors.Is(err, want) {
		t.Errorf("error %v is not %v", err, want)
	}
}

// keysUnder lists the keys of a prefix.
func keysUnder(t *testing.T, rdb *redis.Client, prefix string) []string {
	t.Helper()
	var out []string
	iter := rdb.Scan(context.Background(), 0, prefix+":*", 1000).Iterator()
	for iter.Next(context.Background()) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBadInputsGo: the Go client refuses every bad input of the shared table with the
// table's message, writing nothing, and accepts the inputs at the limits. The same
// table runs against the Python client (tests/test_bad_inputs.py).
func TestBadInputsGo(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for _, c := range loadBadInputs(t) {
		t.Run(c.Name, func(t *testing.T) {
			prefix := redistest.Prefix(t)
			cl := client.New(rdb, client.Options{Prefix: prefix, MaxPayload: c.Client.MaxPayload})
			switch c.Op {
			case "enqueue":
				id, created, err := cl.Enqueue(ctx, c.task())
				checkErr(t, &c, err)
				if c.Error == nil {
					if !created {
						t.Fatal("not created")
					}
					ti, err := cl.Get(ctx, string(c.Task.Queue), id)
					if err != nil || ti.Function != string(c.Task.Function) || ti.Unique != string(c.Task.Unique) {
						t.Fatalf("get: %+v %v", ti, err)
					}
					return
				}
				if ks := keysUnder(t, rdb, prefix); len(ks) != 0 {
					t.Fatalf("a refused enqueue wrote %v", ks)
				}
				// In a batch the bad task gets the same error and its neighbours are created.
				good := client.Task{Queue: "q", Function: "f"}
				rs, err := cl.EnqueueMany(ctx, []client.Task{good, c.task(), good})
				if err != nil {
					t.Fatal(err)
				}
				checkErr(t, &c, rs[1].Err)
				if !rs[0].Created || !rs[2].Created || rs[1].Created || rs[1].ID != "" {
					t.Fatalf("batch results %+v", rs)
				}
			case "get":
				_, err := cl.Get(ctx, string(c.Queue), string(c.ID))
				checkErr(t, &c, err)
			case "cancel":
				checkErr(t, &c, cl.Cancel(ctx, string(c.Queue), string(c.ID)))
			default:
				t.Fatalf("unknown op %q", c.Op)
			}
		})
	}
}
