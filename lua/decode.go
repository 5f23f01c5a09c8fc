package lua

import (
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

// Handoff is one row of a worker's inbox: a task the enqueue started for it (Started
// set), or an entry it delivered to it for the worker to claim (Delivered set).
type Handoff struct {
	InboxEntry string
	Started    *Started
	Delivered  *Delivered
}

// DecodeHandoff decodes an inbox row as enqueue.lua writes it (the prelude's inbox row
// codec).
func DecodeHandoff(id string, v map[string]any) (Handoff, error) {
	h := Handoff{InboxEntry: id}
	get := func(k string) string { s, _ := v[k].(string); return s }
	band, err := strconv.Atoi(get("b"))
	if err != nil || band < 0 || band > keys.MaxPriority || get("e") == "" {
		return h, fmt.Errorf("inbox row %s: bad band or entry", id)
	}
	if get("d") != "" {
		h.Delivered = &Delivered{Band: band, Entry: get("e")}
		return h, nil
	}
	attempt, err := strconv.ParseInt(get("a"), 10, 64)
	if err != nil || get("i") == "" {
		return h, fmt.Errorf("inbox row %s: bad task or attempt", id)
	}
	num := func(k string) int64 { n, _ := strconv.ParseInt(get(k), 10, 64); return n }
	h.Started = &Started{
		Entry: get("e"), Band: band, ID: get("i"), Attempt: attempt, Function: get("f"),
		Payload: get("p"), TimeoutMS: num("t"), MaxRetries: int(num("m")), HasUnique: get("u") != "",
		CreatedMS: num("c"), HandedOff: true,
	}
	return h, nil
}

// SplitInbox sorts rows a blocking read took from a worker's inbox: the tasks started
// for it, the entries delivered to it (to claim), and every row as received (to tell the
// next claim, which deletes them, malformed ones included). err names the first
// malformed row; the others are still sorted.
func SplitInbox(msgs []redis.XMessage) (started []Started, delivered []Delivered, recv []Received, err error) {
	for _, m := range msgs {
		h, derr := DecodeHandoff(m.ID, m.Values)
		r := Received{InboxEntry: m.ID}
		switch {
		case derr != nil:
			if err == nil {
				err = derr
			}
		case h.Delivered != nil:
			delivered = append(delivered, *h.Delivered)
		default:
			started = append(started, *h.Started)
			r.ID = h.Started.ID
		}
		recv = append(recv, r)
	}
	return started, delivered, recv, err
}

// pair reads a reply of {code, text}, as cancel.lua and requeue.lua return.
func pair(cmd *redis.Cmd) (int64, string, error) {
	v, err := cmd.Slice()
	if err != nil {
		return 0, "", err
	}
	if len(v) != 2 {
		return 0, "", fmt.Errorf("unexpected reply of %d values", len(v))
	}
	return num(v[0]), str(v[1]), nil
}

func rows(v any) [][]any {
	list, _ := v.([]any)
	out := make([][]any, 0, len(list))
	for _, x := range list {
		if row, ok := x.([]any); ok {
			out = append(out, row)
		}
	}
	return out
}

func strs(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		out = append(out, str(x))
	}
	return out
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	default:
		return fmt.Sprint(x)
	}
}

func num(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	default:
		return 0
	}
}
