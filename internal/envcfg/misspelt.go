package envcfg

import (
	"slices"
	"strings"
)

// Misspelling is a variable set in the environment that the program does not read,
// named like one it does: most likely a typo, silently ignored otherwise.
type Misspelling struct {
	Name  string   // as set
	Meant []string // the variables read that it resembles, sorted
}

// Misspelt lists the variables of environ ("NAME=value" entries, as os.Environ) that
// start with prefix, are not among known, and resemble one of known: its words (split
// at "_", after the prefix) all appear in the known name, as in DTQ_CONCURRENCY for
// DTQ_WORKER_CONCURRENCY or DTQ_VISIBILITY_TIMEOUT for DTQ_VISIBILITY_TIMEOUT_S; or it
// is within two edits of it, case aside (DTQ_QUEUE, dtq_queues). A variable of another
// program sharing the prefix (the observer's, the scaler's) resembles none of the
// worker's and is left alone. Values are never read into the result.
func Misspelt(environ []string, prefix string, known []Var) []Misspelling {
	names := make(map[string]bool, len(known))
	for _, v := range known {
		names[v.Name] = true
	}
	var out []Misspelling
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if names[name] || !strings.HasPrefix(strings.ToUpper(name), strings.ToUpper(prefix)) {
			continue
		}
		var meant []string
		for _, v := range known {
			if resembles(name, v.Name, prefix) {
				meant = append(meant, v.Name)
			}
		}
		if len(meant) > 0 {
			slices.Sort(meant)
			out = append(out, Misspelling{Name: name, Meant: meant})
		}
	}
	slices.SortFunc(out, func(a, b Misspelling) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// resembles reports whether name looks like a misspelling of known (see Misspelt).
func resembles(name, known, prefix string) bool {
	n, k := strings.ToUpper(name), strings.ToUpper(known)
	if n == k {
		return true // the right name in the wrong case
	}
	if d := len(n) - len(k); d >= -2 && d <= 2 && EditDistance(n, k) <= 2 {
		return true
	}
	words := strings.FieldsFunc(n[len(prefix):], func(r rune) bool { return r == '_' })
	if len(words) == 0 {
		return false
	}
	have := strings.Split(k[len(prefix):], "_")
	for _, w := range words {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// EditDistance is the Levenshtein distance of a and b (bytes): the fewest insertions,
// deletions and substitutions that turn one into the other.
func EditDistance(a, b string) int {
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
