package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// A result is what one run of a mode measured: its JSON object (--json, the struct's
// fields) and the rows it gives the table.
type result interface {
	// figures lists the figures the table shows for the mode, in order; one the run did
	// not measure has ok false.
	figures() []figure
}

// figure is one row of the table: a named figure of one run.
type figure struct {
	name  string
	value float64
	ok    bool
}

func fig(name string, v float64) figure { return figure{name: name, value: v, ok: true} }

// optFig is a figure a run measures only in some environments (nil when it did not).
func optFig(name string, v *float64) figure {
	if v == nil {
		return figure{name: name}
	}
	return fig(name, *v)
}

// some returns a pointer to v: the value of an optional figure that was measured.
func some(v float64) *float64 { return &v }

// encode returns r's JSON object with the system and mode that produced it, keys in
// sorted order.
func encode(r result, system, mode string) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	for k, v := range map[string]string{"system": system, "mode": mode} {
		if obj[k], err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	return json.Marshal(obj)
}

// emit prints r as one line of JSON.
func emit(r result, system, mode string) error {
	b, err := encode(r, system, mode)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

// lowerIsBetter marks figures where the peer's value divided by ours is the speed-up.
func lowerIsBetter(f string) bool {
	return strings.HasSuffix(f, "_ms") || strings.Contains(f, "cpu") || strings.Contains(f, "idle") || strings.Contains(f, "cmds")
}

// printTable prints median [min – max] per figure for each system, and the ratio. The
// rows are the figures of the first result of systems[0].
func printTable(mode string, bySystem map[string][]result, systems []string) {
	if systems == nil {
		for s := range bySystem {
			systems = append(systems, s)
		}
		sort.Strings(systems)
	}
	fmt.Printf("\n%s (%d run(s))\n", mode, len(bySystem[systems[0]]))
	fmt.Printf("  %-30s", "figure")
	for _, s := range systems {
		fmt.Printf(" %-30s", s+": median [min – max]")
	}
	if len(systems) == 2 {
		fmt.Printf(" %s", "dtq advantage")
	}
	fmt.Println()
	var names []string
	if rs := bySystem[systems[0]]; len(rs) > 0 {
		for _, f := range rs[0].figures() {
			names = append(names, f.name)
		}
	}
	for _, f := range names {
		meds := map[string]float64{}
		line := fmt.Sprintf("  %-30s", f)
		any := false
		for _, s := range systems {
			xs := values(bySystem[s], f)
			if len(xs) == 0 {
				line += fmt.Sprintf(" %-30s", "—")
				continue
			}
			any = true
			m, lo, hi := spread(xs)
			meds[s] = m
			line += fmt.Sprintf(" %-30s", fmt.Sprintf("%s [%s – %s]", num(m), num(lo), num(hi)))
		}
		if !any {
			continue
		}
		if len(systems) == 2 {
			a, b := meds["dtq"], meds[systems[1]]
			if systems[0] != "dtq" {
				a, b = meds["dtq"], meds[systems[0]]
			}
			if a > 0 && b > 0 {
				ratio := a / b
				if lowerIsBetter(f) {
					ratio = b / a
				}
				line += fmt.Sprintf(" ×%.2f", ratio)
			}
		}
		fmt.Println(line)
	}
}

// values returns the figure name of every run in rs that measured it.
func values(rs []result, name string) []float64 {
	var xs []float64
	for _, r := range rs {
		if v, ok := valueOf(r, name); ok {
			xs = append(xs, v)
		}
	}
	return xs
}

// valueOf is the figure name of r, and whether r measured it.
func valueOf(r result, name string) (float64, bool) {
	for _, f := range r.figures() {
		if f.name == name && f.ok {
			return f.value, true
		}
	}
	return 0, false
}

func num(x float64) string {
	switch {
	case x >= 1000:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.3g", x)
	}
}
