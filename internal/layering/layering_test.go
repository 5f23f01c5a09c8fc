package layering

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/dtq/dtq"

// pkg is one package of the module as go list -test sees it: a package, or a test
// variant of one ("p [p.test]", "p_test [p.test]", "p.test").
type pkg struct {
	path string // the package it belongs to
	test bool   // a test variant: its test files count too
	deps []string
}

// packages lists the module's packages and their test variants, each with every
// package it depends on, directly or not.
func packages(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-test", "-f",
		`{{.ImportPath}}|{{join .Deps " "}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var ps []pkg
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, deps, ok := strings.Cut(line, "|")
		if !ok {
			continue
		}
		p := pkg{path: path, deps: strings.Fields(deps)}
		if i := strings.Index(path, " ["); i >= 0 {
			p.path, p.test = path[:i], true
		}
		if strings.HasSuffix(p.path, ".test") || strings.HasSuffix(p.path, "_test") {
			p.path, p.test = strings.TrimSuffix(strings.TrimSuffix(p.path, ".test"), "_test"), true
		}
		ps = append(ps, p)
	}
	return ps
}

func under(path, root string) bool { return path == root || strings.HasPrefix(path, root+"/") }

var features = []string{"runtime", "scaler", "client", "observer", "bench", "chaos", "function", "cmd"}

func TestImportRules(t *testing.T) {
	t.Parallel()
	ps := packages(t)
	if len(ps) < 20 {
		t.Fatalf("go list found %d packages: the test would check nothing", len(ps))
	}
	for _, p := range ps {
		rel := strings.TrimPrefix(p.path, module+"/")
		for _, d := range p.deps {
			if !under(d, module) {
				continue
			}
			drel := strings.TrimPrefix(d, module+"/")
			switch {
			case under(rel, "scaler") && under(drel, "runtime"):
				t.Errorf("%s imports %s: the scaler never imports the runtime", p.path, d)
			case !p.test && (under(rel, "lua") || under(rel, "internal")) && isFeature(drel):
				t.Errorf("%s imports %s: lua/ and internal/ import no feature package", p.path, d)
			case !under(rel, "bench") && under(drel, "bench"):
				t.Errorf("%s imports %s: nothing imports bench/", p.path, d)
			}
		}
	}
}

func isFeature(rel string) bool {
	for _, f := range features {
		if under(rel, f) {
			return true
		}
	}
	return false
}
