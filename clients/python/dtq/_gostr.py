"""Go's text conventions, where an error message must read as the Go client's does."""

from __future__ import annotations

import unicodedata

_ESCAPES = {7: "\\a", 8: "\\b", 12: "\\f", 10: "\\n", 13: "\\r", 9: "\\t", 11: "\\v"}


def _rune_at(s: bytes, i: int) -> tuple[str | None, int]:
    """The rune at s[i] and its width, as Go's utf8.DecodeRune reads it: (None, 1) for
    a byte that starts no valid UTF-8 sequence (surrogates and overlong forms
    included)."""
    b = s[i]
    if b < 0x80:
        return chr(b), 1
    if 0xC2 <= b <= 0xDF:
        n = 2
    elif 0xE0 <= b <= 0xEF:
        n = 3
    elif 0xF0 <= b <= 0xF4:
        n = 4
    else:
        return None, 1
    try:
        return s[i:i + n].decode("utf-8"), n
    except UnicodeDecodeError:
        return None, 1


def _printable(ch: str) -> bool:
    """Go's unicode.IsPrint: letters, marks, numbers, punctuation, symbols and the
    ASCII space."""
    return ch == " " or unicodedata.category(ch)[0] in "LMNPS"


def quote(s: bytes) -> str:
    """Go's strconv.Quote (the %q verb) of the bytes s."""
    out = ['"']
    i = 0
    while i < len(s):
        ch, width = _rune_at(s, i)
        i += width
        if ch is None:
            out.append("\\x%02x" % s[i - 1])
            continue
        r = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif _printable(ch):
            out.append(ch)
        elif r in _ESCAPES:
            out.append(_ESCAPES[r])
        elif r < 0x20 or r == 0x7F:
            out.append("\\x%02x" % r)
        elif r < 0x10000:
            out.append("\\u%04x" % r)
        else:
            out.append("\\U%08x" % r)
    out.append('"')
    return "".join(out)


_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def parse_int64(v: bytes | None) -> int:
    """Go's strconv.ParseInt(v, 10, 64), reading as 0 whatever does not parse or is out
    of range (as client.DecodeTask does)."""
    if not v:
        return 0
    digits = v[1:] if v[:1] in (b"+", b"-") else v
    if not digits or not all(0x30 <= c <= 0x39 for c in digits):
        return 0
    n = int(v)
    if n < _INT64_MIN or n > _INT64_MAX:
        return 0
    return n
