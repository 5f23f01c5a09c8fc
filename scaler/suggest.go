package scaler

import (
	"fmt"
	"slices"
	"strings"
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
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
