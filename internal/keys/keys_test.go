package keys

import (
	"strconv"
	"strings"
	"testing"
)

func TestValidQueue(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"default", "a", "emails.high", "A_b-9", strings.Repeat("q", 64)} {
		if err := ValidQueue(ok); err != nil {
			t.Errorf("ValidQueue(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "a b", "a{b}", "a}b", "a:b", "é", "a\nb", strings.Repeat("q", 65), strings.Repeat("q", 10000)} {
		if err := ValidQueue(bad); err == nil {
			t.Errorf("ValidQueue(%.20q…) = nil, want an error", bad)
		}
	}
}

func TestKeysShareTheQueueSlot(t *testing.T) {
	t.Parallel()
	q := New("").Queue("emails")
	for _, k := range append(q.Streams[:], q.Task("x"), q.Schedule(), q.Claimed(), q.Dead(), q.Unique("u"), q.Paused(), q.Stats()) {
		if !strings.HasPrefix(k, "dtq:{emails}:") {
			t.Errorf("key %q does not carry the {emails} hash tag", k)
		}
	}
	if q.Stream(9) != "dtq:{emails}:p9" || q.BandOf("dtq:{emails}:p3") != 3 || q.BandOf("dtq:{other}:p3") != -1 {
		t.Errorf("stream naming broken: %q", q.Stream(9))
	}
	// Scripts build these keys from the prefixes they are given.
	for p := range Bands {
		if q.StreamPrefix()+strconv.Itoa(p) != q.Stream(p) {
			t.Errorf("StreamPrefix()+%d = %q, Stream(%d) = %q", p, q.StreamPrefix()+strconv.Itoa(p), p, q.Stream(p))
		}
	}
	if q.TaskPrefix()+"x" != q.Task("x") || q.UniquePrefix()+"u" != q.Unique("u") || q.InboxPrefix()+"w" != q.Inbox("w") {
		t.Error("a prefix does not name the key it is the prefix of")
	}
}
