package tracing

import "encoding/binary"

// The protobuf wire format, as much of it as the OTLP encoder writes: tags, varints,
// fixed-width numbers and length-delimited bytes, with protowire's meanings. Not
// protowire itself: importing it links google.golang.org/protobuf/internal/detrand,
// whose initialisation hashes the running executable at every start of the worker,
// tracing on or off.

type pwNumber int32

type pwType int8

const (
	pwVarintType  pwType = 0
	pwFixed64Type pwType = 1
	pwBytesType   pwType = 2
	pwFixed32Type pwType = 5
)

func pwAppendTag(b []byte, num pwNumber, typ pwType) []byte {
	return pwAppendVarint(b, uint64(num)<<3|uint64(typ&7))
}

func pwAppendVarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func pwAppendFixed32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }

func pwAppendFixed64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

func pwAppendBytes(b []byte, v []byte) []byte {
	return append(pwAppendVarint(b, uint64(len(v))), v...)
}

func pwAppendString(b []byte, v string) []byte {
	return append(pwAppendVarint(b, uint64(len(v))), v...)
}

func pwEncodeBool(x bool) uint64 {
	if x {
		return 1
	}
	return 0
}
