package keys

import (
	"cmp"
	"strconv"
	"strings"
	"time"
)

// EntryID is a stream entry id, MS-SEQ: the milliseconds of its creation and a
// sequence number within them.
type EntryID struct{ MS, Seq uint64 }

// ParseEntryID reads an id MS-SEQ as Redis writes it; anything else is refused.
func ParseEntryID(s string) (EntryID, bool) {
	ms, seq, ok := strings.Cut(s, "-")
	m, err1 := strconv.ParseUint(ms, 10, 64)
	q, err2 := strconv.ParseUint(seq, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return EntryID{}, false
	}
	return EntryID{MS: m, Seq: q}, true
}

func (a EntryID) String() string {
	return strconv.FormatUint(a.MS, 10) + "-" + strconv.FormatUint(a.Seq, 10)
}

// Compare orders ids as Redis does: by MS, then by Seq.
func (a EntryID) Compare(b EntryID) int {
	if c := cmp.Compare(a.MS, b.MS); c != 0 {
		return c
	}
	return cmp.Compare(a.Seq, b.Seq)
}

// Time is when the entry was added (its MS part).
func (a EntryID) Time() time.Time { return time.UnixMilli(int64(a.MS)) }
