package keys_test

import (
	"testing"
	"time"

	"github.com/dtq/dtq/internal/keys"
)

func TestEntryID(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"0-0", "1-2", "1700000000000-18446744073709551615"} {
		if id, ok := keys.ParseEntryID(in); !ok || id.String() != in {
			t.Errorf("ParseEntryID(%q) = %v %v", in, id, ok)
		}
	}
	for _, in := range []string{"", "-", "1", "a-1", "1-", "-1", "1-2-3", "+1-2", "1-+2", " 1-2", "18446744073709551616-0"} {
		if id, ok := keys.ParseEntryID(in); ok {
			t.Errorf("ParseEntryID(%q) = %v, want refused", in, id)
		}
	}
	a, _ := keys.ParseEntryID("1-9")
	b, _ := keys.ParseEntryID("2-0")
	c, _ := keys.ParseEntryID("2-10")
	if a.Compare(b) >= 0 || b.Compare(a) <= 0 || b.Compare(c) >= 0 || a.Compare(a) != 0 {
		t.Error("Compare does not order by MS, then Seq")
	}
	if got := c.Time(); !got.Equal(time.UnixMilli(2)) {
		t.Errorf("Time = %v", got)
	}
}
