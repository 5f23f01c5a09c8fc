package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// runDir writes files (name to content) into a fresh directory.
func runDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoad(t *testing.T) {
	dir := runDir(t, map[string]string{
		"replicas.log": "1000 0\n\n1100 1\n1100 4\n  \n5000 4\n9000 0\n",
		"runner.log":   "1150 start 1\n1150 start 2\n6000 stop 2\n7000 exit 2 0\n",
		"backlog.log":  "900 64 0\n1150 32 32\r\n1400 0 64\n1650 0 64\n",
		"marks.log":    "950 burst of 64   tasks \n8000 scaler killed\n",
	})
	tl, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("replicas", tl.replicas, []step{{1000, 0}, {1100, 4}, {9000, 0}})
	check("waiting", tl.waiting, []step{{900, 64}, {1150, 32}, {1400, 0}})
	check("running", tl.running, []step{{900, 0}, {1150, 32}, {1400, 64}})
	check("workers", tl.workers, []step{{900, 0}, {1150, 2}, {7000, 1}})
	check("draining", tl.draining, []step{{900, 0}, {6000, 1}, {7000, 0}})
	check("marks", tl.marks, []mark{{950, "burst of 64   tasks"}, {8000, "scaler killed"}})
	check("first, last", [2]int64{tl.first, tl.last}, [2]int64{900, 9000})
}

func TestLoadOptionalFilesMissing(t *testing.T) {
	tl, err := load(runDir(t, map[string]string{"replicas.log": "1000 1\n2000 0\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if tl.workers != nil || tl.draining != nil || tl.waiting != nil || tl.running != nil || tl.marks != nil {
		t.Errorf("series from missing files: %+v", tl)
	}
	if tl.first != 1000 || tl.last != 2000 {
		t.Errorf("first, last = %d, %d, want 1000, 2000", tl.first, tl.last)
	}
	if _, err := load(runDir(t, map[string]string{"runner.log": "1000 start 1\n"})); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("without replicas.log: err = %v, want not exist", err)
	}
	if _, err := load(runDir(t, map[string]string{"replicas.log": "\n\n"})); err == nil {
		t.Error("an empty replicas.log loaded")
	}
}

func TestLoadMalformed(t *testing.T) {
	for _, tc := range []struct{ file, content, want string }{
		{"replicas.log", "1000 1\n1100 1 2\n", "replicas.log:2: "},
		{"replicas.log", "1000 1\n\n1100 -1\n", "replicas.log:3: "},
		{"replicas.log", "x 1\n", "replicas.log:1: want a Unix millisecond stamp"},
		{"replicas.log", "2000 1\n1000 2\n", "replicas.log:2: stamp before"},
		{"runner.log", "1000 start 1\n1001 stop\n", "runner.log:2: want MS start SEQ"},
		{"runner.log", "1000 exit 1\n", "runner.log:1: "},
		{"runner.log", "1000 exit 1 x\n", "runner.log:1: "},
		{"runner.log", "1000 start 1 0\n", "runner.log:1: "},
		{"runner.log", "1000 spawn 1\n", "runner.log:1: "},
		{"backlog.log", "1000 1 1\n1250 3\n", "backlog.log:2: want 2 fields"},
		{"backlog.log", "1000 1 two\n", "backlog.log:1: field 3"},
		{"marks.log", "1000 ok\n1001\n", "marks.log:2: want MS LABEL"},
	} {
		files := map[string]string{"replicas.log": "1000 0\n"}
		files[tc.file] = tc.content
		_, err := load(runDir(t, files))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: err = %v, want one with %q", tc.file, tc.content, err, tc.want)
		}
	}
}

func TestWorkerCounts(t *testing.T) {
	evs := []runnerEvent{
		{1000, "start", 1},
		{1000, "start", 2}, // same stamp: one step to 2
		{2000, "stop", 2},
		{2500, "start", 3},
		{3000, "exit", 2},  // drained
		{4000, "exit", 3},  // killed without a stop: gone all the same
		{4500, "stop", 3},  // after its exit: nothing
		{4600, "start", 1}, // a second start: nothing
		{5000, "stop", 1},
		{5000, "stop", 1}, // a second stop: nothing
		{6000, "exit", 1},
		{7000, "exit", 9}, // never started: nothing
	}
	workers, draining := workerCounts(evs, 0)
	if want := []step{{0, 0}, {1000, 2}, {2500, 3}, {3000, 2}, {4000, 1}, {6000, 0}}; !reflect.DeepEqual(workers, want) {
		t.Errorf("workers = %v, want %v", workers, want)
	}
	if want := []step{{0, 0}, {2000, 1}, {3000, 0}, {5000, 1}, {6000, 0}}; !reflect.DeepEqual(draining, want) {
		t.Errorf("draining = %v, want %v", draining, want)
	}
}

func TestStepPath(t *testing.T) {
	s := []step{{0, 0}, {1000, 2}, {3000, 1}}
	x := func(ms int64) float64 { return float64(ms) / 10 }
	y := func(v int) float64 { return 100 - 10*float64(v) }
	if got, want := stepPath(s, 4000, x, y), "M0.0,100.0H100.0V80.0H300.0V90.0H400.0"; got != want {
		t.Errorf("stepPath = %s, want %s", got, want)
	}
	if got := stepPath(nil, 4000, x, y); got != "" {
		t.Errorf("stepPath(nil) = %q", got)
	}
}

func TestWindow(t *testing.T) {
	s := []step{{1000, 1}, {2000, 3}, {3000, 0}, {4000, 2}}
	for _, tc := range []struct {
		from, to int64
		want     []step
	}{
		{0, 5000, s},
		{2000, 3500, []step{{2000, 3}, {3000, 0}}},
		{2500, 3500, []step{{2500, 3}, {3000, 0}}},
		{0, 500, nil},
	} {
		if got := window(s, tc.from, tc.to); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("window(%d, %d) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}

func TestScales(t *testing.T) {
	for hi, want := range map[int][2]int{0: {1, 1}, 1: {1, 1}, 4: {4, 1}, 9: {10, 2}, 16: {16, 2}, 17: {20, 5}, 64: {70, 10}} {
		if top, step := yScale(hi); [2]int{top, step} != want {
			t.Errorf("yScale(%d) = %d, %d, want %v", hi, top, step, want)
		}
	}
	for span, want := range map[int64]int64{500: 100, 10_000: 1000, 40_000: 5000, 90_000: 10_000, 3_600_000: 600_000} {
		if got := xStep(span); got != want {
			t.Errorf("xStep(%d) = %d, want %d", span, got, want)
		}
	}
}

func TestRender(t *testing.T) {
	dir := runDir(t, map[string]string{
		"replicas.log": "1000 0\n1032 1\n2250 4\n20000 2\n30000 0\n",
		"runner.log":   "1082 start 1\n2300 start 2\n2300 start 3\n2300 start 4\n20050 stop 4\n20050 stop 3\n24000 exit 4 0\n25000 exit 3 0\n30050 exit 2 -1\n30050 stop 1\n30300 exit 1 0\n",
		"backlog.log":  "1000 64 0\n1250 48 16\n2500 0 64\n6500 0 0\n",
		"marks.log":    "1000 burst of 64 tasks\n1100 <script>alert(1)</script>\n1200 a & b\n20000 scaler killed\n",
	})
	tl, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	svg := render(tl, `1 -> 4 "e2e"`, tl.first, tl.last)
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
	}
	for _, want := range []string{
		`viewBox="0 0 1000 560"`, `font-family="sans-serif"`,
		"1 -&gt; 4 &#34;e2e&#34;", "waiting (undelivered)", ">running<", "replicas asked for",
		"workers running", "draining (SIGTERM sent)", "burst of 64 tasks", "scaler killed",
		"&lt;script&gt;alert(1)&lt;/script&gt;", "a &amp; b",
	} {
		if !bytes.Contains(svg, []byte(want)) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
	if bytes.Contains(svg, []byte("<script")) || bytes.Contains(svg, []byte("a & b")) {
		t.Error("a label is not escaped")
	}
	if again := render(tl, `1 -> 4 "e2e"`, tl.first, tl.last); !bytes.Equal(svg, again) {
		t.Error("two renders of the same run differ")
	}
}

func TestPlaceLabels(t *testing.T) {
	xs := xScale{0, 10_000}
	marks := []mark{{0, "first"}, {100, "second"}, {5000, "far"}, {10_000, "at the end, a label long enough to pass the edge"}, {20_000, "out of range"}}
	got := placeLabels(marks, xs)
	if len(got) != 4 {
		t.Fatalf("placed %d labels, want 4: %+v", len(got), got)
	}
	for i, want := range []struct {
		row    int
		anchor string
	}{{0, "start"}, {1, "start"}, {0, "start"}, {0, "end"}} {
		if got[i].row != want.row || got[i].anchor != want.anchor {
			t.Errorf("label %q: row %d %s, want row %d %s", got[i].text, got[i].row, got[i].anchor, want.row, want.anchor)
		}
	}
}
