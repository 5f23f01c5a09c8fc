package scaler

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dtq/dtq/internal/envcfg"
)

// unknownKey is the error of a metadata key the scaler does not know: it suggests the
// nearest known key (a did-you-mean) when one is close enough, and lists the own keys.
func unknownKey(k string) error {
	known := append(slices.Clone(ownKeys), kedaKeys...)
	best, bestD := "", 4
	for _, c := range known {
		if d := editDistance(strings.ToLower(k), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	if best != "" {
		return fmt.Errorf("unknown key (did you mean %q?); known keys: %s", best, strings.Join(ownKeys, ", "))
	}
	return fmt.Errorf("unknown key; known keys: %s", strings.Join(ownKeys, ", "))
}

// editDistance is the Levenshtein distance of short strings (keys are cut at 64 bytes).
func editDistance(a, b string) int {
	if len(a) > 64 {
		a = a[:64]
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return envcfg.EditDistance(a, b)
}
