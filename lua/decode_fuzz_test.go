package lua

import (
	"encoding/binary"
	"testing"
)

// replyOf turns fuzz bytes into a Redis reply tree as go-redis hands it to decodeClaim:
// nested []any of string, int64 and nil.
func replyOf(b []byte, depth int) (any, []byte) {
	if len(b) == 0 {
		return nil, b
	}
	tag, b := b[0]%4, b[1:]
	switch tag {
	case 0:
		return nil, b
	case 1:
		var buf [8]byte
		n := copy(buf[:], b)
		return int64(binary.LittleEndian.Uint64(buf[:])), b[n:]
	case 2:
		if len(b) == 0 {
			return "", b
		}
		n := min(int(b[0]), len(b)-1)
		return string(b[1 : 1+n]), b[1+n:]
	default:
		if depth > 4 || len(b) == 0 {
			return []any{}, b
		}
		n := int(b[0] % 16)
		b = b[1:]
		list := make([]any, 0, n)
		for i := 0; i < n; i++ {
			var v any
			v, b = replyOf(b, depth+1)
			list = append(list, v)
		}
		return list, b
	}
}

// encodeReply is replyOf's inverse, for the seeds.
func encodeReply(v any) []byte {
	switch x := v.(type) {
	case nil:
		return []byte{0}
	case int64:
		out := []byte{1}
		return binary.LittleEndian.AppendUint64(out, uint64(x))
	case string:
		return append([]byte{2, byte(len(x))}, x...)
	case []any:
		out := []byte{3, byte(len(x))}
		for _, e := range x {
			out = append(out, encodeReply(e)...)
		}
		return out
	}
	panic("unreachable")
}

// decodeClaim reads whatever a (possibly foreign or future) claim script returns: it
// never panics, and what it accepts is consistent with what it was given.
func FuzzDecodeClaim(f *testing.F) {
	started := []any{"1700000000000-0", int64(9), "task-1", int64(2), "send", `{"to":"x"}`, "30000", "3", int64(1), "u", "1700000000000", int64(0)}
	f.Add(encodeReply([]any{[]any{started}, []any{}, []any{}, int64(0)}))
	f.Add(encodeReply([]any{[]any{"1700000000000-0{9{2{0{task-1", "30000 3 1700000000000 1 send", `{"to":"x"}`,
		"1700000000000-1{3{1{1{task-2", "0 0 0 0 f", "", int64(2), "q"}, []any{}, []any{}, int64(0)}))
	f.Add(encodeReply([]any{[]any{}, []any{[]any{"1-1", int64(0), "t", "dead"}}, []any{[]any{"1-2", int64(3), "invalid-1-2", "malformed entry: no task field"}}, int64(1)}))
	f.Add(encodeReply([]any{[]any{[]any{"1-0", "x"}}, nil, "junk", "1"}))
	f.Add(encodeReply([]any{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, _ := replyOf(b, 0)
		list, _ := v.([]any)
		r, err := decodeClaim(list)
		if err != nil {
			return
		}
		if len(list) != 4 {
			t.Fatalf("accepted a reply of %d elements", len(list))
		}
		// a start is a row, or three values or more: never more starts than values
		if given, _ := list[0].([]any); len(r.Started) > len(given) {
			t.Fatalf("%d started values decoded as %d starts", len(given), len(r.Started))
		}
		for _, s := range r.Started {
			if s.Reclaimed && s.HandedOff {
				t.Fatalf("a start both reclaimed and handed off: %+v", s)
			}
		}
		if len(r.Absorbed) > len(rows(list[1])) || len(r.Invalid) > len(rows(list[2])) {
			t.Fatalf("decoded more rows than given: %+v", r)
		}
	})
}

// A start's head is cut at its first four braces: the id keeps any brace after them,
// and a head of fewer parts, or of a band out of range, is refused.
func TestDecodeHead(t *testing.T) {
	s, err := decodeHead("17-3{7{2{1{a{b}c")
	if err != nil || s.Entry != "17-3" || s.Band != 7 || s.Attempt != 2 || !s.Reclaimed || s.HandedOff || s.ID != "a{b}c" {
		t.Fatalf("decodeHead: %+v, %v", s, err)
	}
	if s, err = decodeHead("1-1{0{1{2{x"); err != nil || !s.HandedOff || s.ID != "x" {
		t.Fatalf("hand-off head: %+v, %v", s, err)
	}
	for _, bad := range []string{"", "1-1", "1-1{0{1{0", "1-1{x{1{0{id", "1-1{10{1{0{id", "1-1{-1{1{0{id"} {
		if s, err := decodeHead(bad); err == nil {
			t.Errorf("decodeHead(%q) = %+v, want an error", bad, s)
		}
	}
}
