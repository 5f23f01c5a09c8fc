package observer_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/dtq/dtq/internal/envcfg"
	"github.com/dtq/dtq/observer"
)

// observer/README.md's table lists every variable --help lists.
func TestReadmeTableMatchesEnvVars(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range envcfg.TableMismatches(string(readme), observer.EnvVars()) {
		t.Errorf("observer/README.md: %s", m)
	}
}

// The token's help states the shortest token Validate accepts.
func TestTokenHelpStatesMinTokenBytes(t *testing.T) {
	t.Parallel()
	for _, v := range observer.EnvVars() {
		if v.Name == "DTQ_OBSERVER_TOKEN" {
			if want := "at least " + strconv.Itoa(observer.MinTokenBytes) + " bytes"; !strings.Contains(v.Help, want) {
				t.Errorf("DTQ_OBSERVER_TOKEN's help %q lacks %q", v.Help, want)
			}
			return
		}
	}
	t.Error("no DTQ_OBSERVER_TOKEN")
}
