package scaler

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/dtq/dtq/internal/queuestat"
)

// The band grammar of the metadata: a band set (priorities) and band groups with their
// own target (bandTargets).

// BandTarget is one band group with its own target.
type BandTarget struct {
	Hi, Lo int // bands Hi down to Lo
	Target float64
}

// Bands is the set of bands of the group.
func (g BandTarget) Bands() queuestat.Bands {
	var b queuestat.Bands
	for p := g.Lo; p <= g.Hi; p++ {
		b |= queuestat.Band(p)
	}
	return b
}

// ParseBands reads a band set: "all", a band ("9"), a range ("9-7" or "7-9"), or a
// comma-separated list of those ("9,5-3").
func ParseBands(s string) (queuestat.Bands, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "all") {
		return queuestat.AllBands, nil
	}
	if s == "" {
		return 0, errors.New(`is empty: want "all", a band 0..9, a range like 9-7, or a list like 9,5-3`)
	}
	var b queuestat.Bands
	for _, part := range strings.Split(s, ",") {
		hi, lo, err := parseRange(part)
		if err != nil {
			return 0, err
		}
		for p := lo; p <= hi; p++ {
			b |= queuestat.Band(p)
		}
	}
	return b, nil
}

// parseRange reads "7" or "9-7" (either order) into hi >= lo.
func parseRange(s string) (hi, lo int, err error) {
	s = strings.TrimSpace(s)
	a, z, isRange := strings.Cut(s, "-")
	x, err1 := parseBand(a)
	y := x
	var err2 error
	if isRange {
		y, err2 = parseBand(z)
	}
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%q is not a band 0..9 or a range of bands like 9-7", s)
	}
	return max(x, y), min(x, y), nil
}

func parseBand(s string) (int, error) {
	s = strings.TrimSpace(s)
	if len(s) != 1 || s[0] < '0' || s[0] > '9' {
		return 0, fmt.Errorf("%q is not a band 0..9", s)
	}
	return int(s[0] - '0'), nil
}

// parseBandTargets reads "9-8:2,7:4": comma-separated groups, each a band or a band
// range, a colon, and the group's target per replica.
func parseBandTargets(s string) ([]BandTarget, error) {
	var out []BandTarget
	for _, part := range strings.Split(s, ",") {
		r, t, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("%q: want BANDS:TARGET, like 9-8:2", strings.TrimSpace(part))
		}
		hi, lo, err := parseRange(r)
		if err != nil {
			return nil, err
		}
		target, err := parseNumber(t)
		if err != nil {
			return nil, fmt.Errorf("%q: target %w", strings.TrimSpace(part), err)
		}
		out = append(out, BandTarget{Hi: hi, Lo: lo, Target: target})
	}
	return out, nil
}

func (g BandTarget) label() string {
	if g.Hi == g.Lo {
		return strconv.Itoa(g.Hi)
	}
	return strconv.Itoa(g.Hi) + "-" + strconv.Itoa(g.Lo)
}
