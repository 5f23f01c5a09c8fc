package main

import (
	"encoding/xml"
	"fmt"
	"strings"
	"time"
)

// The picture's layout, in SVG user units.
const (
	width, height       = 1000, 560
	plotLeft, plotRight = 60.0, 790.0
	legendLeft          = 808.0
	labelTop            = 48.0 // baseline of the first row of mark labels
	plotBottom          = 482.0
	panelGap            = 26.0
	labelRowHeight      = 12.0
	maxLabelRows        = 6
	charWidth           = 6.2 // a generous average width at font-size 11
	maxLabel            = 60  // characters of a mark label shown
)

// xScale maps Unix ms in [from, to] onto the plot's width.
type xScale struct{ from, to int64 }

func (s xScale) x(ms int64) float64 {
	return plotLeft + float64(ms-s.from)*(plotRight-plotLeft)/float64(s.to-s.from)
}

// series is a step series and how to draw it: a line, or an area down to 0
// when fill is set.
type series struct {
	name               string
	steps              []step
	stroke, fill, dash string
	width              float64
}

// panel is a plot area between y0 (top) and y1 with an integer y axis.
type panel struct {
	y0, y1    float64
	top, step int
	label     string
	series    []series // in legend order; areas are drawn under lines
}

func newPanel(y0, y1 float64, label string, ss []series) panel {
	hi := 0
	for _, s := range ss {
		for _, p := range s.steps {
			hi = max(hi, p.v)
		}
	}
	top, step := yScale(hi)
	return panel{y0, y1, top, step, label, ss}
}

func (p panel) y(v int) float64 {
	return p.y1 - float64(v)*(p.y1-p.y0)/float64(p.top)
}

// render draws the timeline between from and to (Unix ms) as an SVG document.
func render(t *timeline, title string, from, to int64) []byte {
	if to <= from {
		to = from + 1000
	}
	xs := xScale{from, to}
	w := func(s []step) []step { return window(s, from, to) }
	labels := placeLabels(t.marks, xs)
	y0 := 40.0 // under the title; under the mark labels if any
	for _, l := range labels {
		y0 = max(y0, labelTop+float64(l.row)*labelRowHeight+10)
	}
	h := (plotBottom - y0 - panelGap) / 2
	tasks := newPanel(y0, y0+h, "tasks", []series{
		{name: "waiting (undelivered)", steps: w(t.waiting), stroke: "#e6550d", fill: "#fdd0a2", width: 1},
		{name: "running", steps: w(t.running), stroke: "#3182bd", width: 2},
	})
	replicas := newPanel(plotBottom-h, plotBottom, "replicas / workers", []series{
		{name: "replicas asked for", steps: w(t.replicas), stroke: "#d62728", width: 2.5},
		{name: "workers running", steps: w(t.workers), stroke: "#1b7837", dash: "6 3", width: 1.5},
		{name: "draining (SIGTERM sent)", steps: w(t.draining), stroke: "#7fbc41", fill: "#d9f0a3", width: 1},
	})
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", width, height)
	text(&b, width/2, 26, "middle", `font-size="16" font-weight="bold"`, title)
	drawXAxis(&b, xs, tasks, replicas)
	drawPanel(&b, xs, tasks)
	drawPanel(&b, xs, replicas)
	drawMarks(&b, labels, replicas.y1)
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// drawXAxis draws the time gridlines of both panels and the tick labels and
// title under the lower one.
func drawXAxis(b *strings.Builder, xs xScale, upper, lower panel) {
	step := xStep(xs.to - xs.from)
	for ms := int64(0); xs.from+ms <= xs.to; ms += step {
		x := xs.x(xs.from + ms)
		for _, p := range []panel{upper, lower} {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", x, p.y0, x, p.y1)
		}
		label := fmt.Sprintf("%d", ms/1000)
		if step < 1000 {
			label = fmt.Sprintf("%.1f", float64(ms)/1000)
		}
		text(b, x, lower.y1+16, "middle", "", label)
	}
	since := time.UnixMilli(xs.from).UTC().Format("2006-01-02 15:04:05.000 UTC")
	text(b, (plotLeft+plotRight)/2, lower.y1+40, "middle", "", "seconds since "+since)
}

// drawPanel draws a panel's y gridlines and ticks, its series (areas under
// lines), its frame, y axis label and legend.
func drawPanel(b *strings.Builder, xs xScale, p panel) {
	for v := 0; v <= p.top; v += p.step {
		y := p.y(v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", plotLeft, y, plotRight, y)
		text(b, plotLeft-6, y+4, "end", "", fmt.Sprintf("%d", v))
	}
	for _, areas := range []bool{true, false} {
		for _, s := range p.series {
			if len(s.steps) == 0 || (s.fill != "") != areas {
				continue
			}
			d, fill := stepPath(s.steps, xs.to, xs.x, p.y), "none"
			if areas {
				d += fmt.Sprintf("V%.1fH%.1fZ", p.y(0), xs.x(s.steps[0].at))
				fill = s.fill
			}
			fmt.Fprintf(b, `<path d="%s" fill="%s" %s/>`+"\n", d, fill, strokeAttrs(s))
		}
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888"/>`+"\n",
		plotLeft, p.y0, plotRight-plotLeft, p.y1-p.y0)
	cy := (p.y0 + p.y1) / 2
	text(b, 20, cy, "middle", fmt.Sprintf(`transform="rotate(-90 20 %.1f)"`, cy), p.label)
	drawLegend(b, p)
}

// drawLegend lists a panel's series that have data, right of the panel.
func drawLegend(b *strings.Builder, p panel) {
	y := p.y0 + 10
	for _, s := range p.series {
		if len(s.steps) == 0 {
			continue
		}
		if s.fill != "" {
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="18" height="10" fill="%s" %s/>`+"\n", legendLeft, y-5, s.fill, strokeAttrs(s))
		} else {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" %s/>`+"\n", legendLeft, y, legendLeft+18, y, strokeAttrs(s))
		}
		text(b, legendLeft+24, y+4, "start", "", s.name)
		y += 20
	}
}

// strokeAttrs returns the stroke attributes of a series' line or outline.
func strokeAttrs(s series) string {
	a := fmt.Sprintf(`stroke="%s" stroke-width="%.1f"`, s.stroke, s.width)
	if s.dash != "" {
		a += fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
	}
	return a
}

// stepPath returns the SVG path of a step series: each value holds
// horizontally until the next step, the last one until end.
func stepPath(s []step, end int64, x func(int64) float64, y func(int) float64) string {
	if len(s) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "M%.1f,%.1f", x(s[0].at), y(s[0].v))
	for _, p := range s[1:] {
		fmt.Fprintf(&b, "H%.1fV%.1f", x(p.at), y(p.v))
	}
	fmt.Fprintf(&b, "H%.1f", x(end))
	return b.String()
}

// drawMarks draws each placed mark as a dashed line from its label down to
// bottom.
func drawMarks(b *strings.Builder, labels []placedLabel, bottom float64) {
	for _, l := range labels {
		y, dx := labelTop+float64(l.row)*labelRowHeight, 3.0
		if l.anchor == "end" {
			dx = -3
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#666" stroke-dasharray="4 3"/>`+"\n",
			l.x, y-9, l.x, bottom)
		text(b, l.x+dx, y, l.anchor, `font-size="11" fill="#333"`, l.text)
	}
}

// placedLabel is a mark's line position, its label's row above the upper
// panel and the label's extent [l, r] on either side of the line.
type placedLabel struct {
	x, l, r      float64
	row          int
	anchor, text string
}

// placeLabels gives the label of each mark inside the range the first row
// where it fits, right of its line, or left of it near the right edge. Past
// maxLabelRows rows it takes the last one, overlap or not.
func placeLabels(marks []mark, xs xScale) []placedLabel {
	var out []placedLabel
	for _, m := range marks {
		if m.at < xs.from || m.at > xs.to {
			continue
		}
		text := []rune(m.label)
		if len(text) > maxLabel {
			text = append(text[:maxLabel-1], '…')
		}
		p := placedLabel{x: xs.x(m.at), anchor: "start", text: string(text)}
		p.l, p.r = p.x, p.x+3+float64(len(text))*charWidth
		if p.r > width-4 {
			p.l, p.r, p.anchor = 2*p.x-p.r, p.x, "end"
		}
		for p.row < maxLabelRows-1 && !fits(p, out) {
			p.row++
		}
		out = append(out, p)
	}
	return out
}

// fits reports whether p clears the labels placed before it: it keeps 6
// units from the labels in its row, the lines of the marks above do not
// cross its label, and its line crosses no label below.
func fits(p placedLabel, placed []placedLabel) bool {
	for _, q := range placed {
		if q.row == p.row && p.l < q.r+6 && q.l < p.r+6 ||
			q.row < p.row && p.l < q.x && q.x < p.r ||
			q.row > p.row && q.l < p.x && p.x < q.r {
			return false
		}
	}
	return true
}

// text writes a text element; s is escaped, attrs is written as it is.
func text(b *strings.Builder, x, y float64, anchor, attrs, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s"`, x, y, anchor)
	if attrs != "" {
		b.WriteString(" " + attrs)
	}
	b.WriteString(">")
	xml.EscapeText(b, []byte(s))
	b.WriteString("</text>\n")
}

// xStep returns a time tick step in ms giving at most 10 steps over span.
func xStep(span int64) int64 {
	for _, s := range []int64{100, 200, 500, 1e3, 2e3, 5e3, 10e3, 15e3, 20e3, 30e3, 60e3, 120e3, 300e3, 600e3, 900e3, 1800e3, 3600e3} {
		if span/s <= 10 {
			return s
		}
	}
	return 3600e3 * (span/36000e3 + 1)
}

// yScale returns the top of an integer axis holding hi and its tick step:
// 1, 2 or 5 times a power of ten, with at most 8 steps.
func yScale(hi int) (top, step int) {
	for m := 1; ; m *= 10 {
		for _, s := range []int{m, 2 * m, 5 * m} {
			if n := (hi + s - 1) / s; n <= 8 {
				return max(n, 1) * s, s
			}
		}
	}
}
