package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// progress draws a bar on stderr when stderr is a terminal.
type progress struct {
	label string
	total int64
	on    bool
	last  time.Time
}

func newProgress(label string, total int64) *progress {
	st, err := os.Stderr.Stat()
	return &progress{label: label, total: total, on: err == nil && st.Mode()&os.ModeCharDevice != 0}
}

func (p *progress) set(done int64) {
	if !p.on || time.Since(p.last) < 100*time.Millisecond && done < p.total {
		return
	}
	p.last = time.Now()
	const width = 30
	k := int(done * width / max(p.total, 1))
	fmt.Fprintf(os.Stderr, "\r%-12s [%s%s] %d/%d", p.label, strings.Repeat("#", k), strings.Repeat(".", width-k), done, p.total)
}

func (p *progress) done() {
	if p.on {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
}
