package tracing

import (
	"bytes"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// The wire functions write what protowire writes.
func TestWireMatchesProtowire(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 300, 1 << 32, math.MaxInt64, math.MaxUint64} {
		if got, want := pwAppendVarint(nil, v), protowire.AppendVarint(nil, v); !bytes.Equal(got, want) {
			t.Errorf("varint %d: %x, want %x", v, got, want)
		}
		if got, want := pwAppendFixed64(nil, v), protowire.AppendFixed64(nil, v); !bytes.Equal(got, want) {
			t.Errorf("fixed64 %d: %x, want %x", v, got, want)
		}
		if got, want := pwAppendFixed32(nil, uint32(v)), protowire.AppendFixed32(nil, uint32(v)); !bytes.Equal(got, want) {
			t.Errorf("fixed32 %d: %x, want %x", uint32(v), got, want)
		}
	}
	for _, num := range []pwNumber{1, 15, 16, 2047, 2048, 1<<29 - 1} {
		for _, typ := range []pwType{pwVarintType, pwFixed64Type, pwBytesType, pwFixed32Type} {
			if got, want := pwAppendTag(nil, num, typ), protowire.AppendTag(nil, protowire.Number(num), protowire.Type(typ)); !bytes.Equal(got, want) {
				t.Errorf("tag %d/%d: %x, want %x", num, typ, got, want)
			}
		}
	}
	for _, s := range []string{"", "a", string(make([]byte, 200))} {
		if got, want := pwAppendString(nil, s), protowire.AppendString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("string of %d: %x, want %x", len(s), got, want)
		}
		if got, want := pwAppendBytes(nil, []byte(s)), protowire.AppendBytes(nil, []byte(s)); !bytes.Equal(got, want) {
			t.Errorf("bytes of %d: %x, want %x", len(s), got, want)
		}
	}
	if pwEncodeBool(true) != protowire.EncodeBool(true) || pwEncodeBool(false) != protowire.EncodeBool(false) {
		t.Error("bool")
	}
}
