package envcfg

import "strings"

// TableMismatches compares a Markdown table of variables (rows "| `NAME` | …", several
// names in one row allowed: "| `A`, `B` | …") with vars: it lists every variable
// without a row, and every one whose row does not state its range, as a cell of its
// own ("| min..max") or opening a parenthesis ("(min..max"). The tests of each command check their README with it.
func TableMismatches(markdown string, vars []Var) []string {
	rows := map[string]string{}
	for _, line := range strings.Split(markdown, "\n") {
		if first, _, ok := strings.Cut(strings.TrimPrefix(line, "| "), " |"); ok && strings.HasPrefix(line, "| `") {
			for _, name := range strings.Split(first, ", ") {
				rows[strings.Trim(name, "`")] = line
			}
		}
	}
	var out []string
	for _, v := range vars {
		row, ok := rows[v.Name]
		if !ok {
			out = append(out, "no row for "+v.Name)
			continue
		}
		if i := strings.LastIndex(v.Help, "; "); i >= 0 && strings.Contains(v.Help[i:], "..") {
			rng := strings.Fields(v.Help[i+2:])[0]
			if !strings.Contains(row, "| "+rng) && !strings.Contains(row, "("+rng) {
				out = append(out, "the row of "+v.Name+" lacks its range "+rng+": "+row)
			}
		}
	}
	return out
}
