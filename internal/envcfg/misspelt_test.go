package envcfg

import (
	"reflect"
	"testing"
)

func TestMisspelt(t *testing.T) {
	known := []Var{{Name: "DTQ_WORKER_CONCURRENCY"}, {Name: "DTQ_QUEUES"}, {Name: "DTQ_VISIBILITY_TIMEOUT_S"},
		{Name: "DTQ_REDIS_URL"}, {Name: "DTQ_REDIS_CA_FILE"}, {Name: "DTQ_LOG_LEVEL"}}
	environ := []string{
		"DTQ_CONCURRENCY=8",                 // a word of DTQ_WORKER_CONCURRENCY
		"DTQ_QUEUE=emails",                  // one edit
		"dtq_queues=emails",                 // the right name in the wrong case
		"DTQ_VISIBILITY_TIMEOUT=60",         // the unit left out
		"DTQ_REDIS=redis://u:secret@h:6379", // two variables it could be
		"DTQ_QUEUES=default",                // known
		"DTQ_OBSERVER_TOKEN=secret",         // another program's
		"DTQ_SCALER_ADDR=:6000",             // another program's
		"DTQ_=x",                            // the prefix alone
		"DTQ_WORKER_CONCURRENCY",            // known, no "="
		"HOME=/root",                        // not ours
		"QUEUES=x",                          // not ours
		"DTQ_LOG_LEVEL=a=b",                 // known, "=" in the value
	}
	got := Misspelt(environ, "DTQ_", known)
	want := []Misspelling{
		{Name: "DTQ_CONCURRENCY", Meant: []string{"DTQ_WORKER_CONCURRENCY"}},
		{Name: "DTQ_QUEUE", Meant: []string{"DTQ_QUEUES"}},
		{Name: "DTQ_REDIS", Meant: []string{"DTQ_REDIS_CA_FILE", "DTQ_REDIS_URL"}},
		{Name: "DTQ_VISIBILITY_TIMEOUT", Meant: []string{"DTQ_VISIBILITY_TIMEOUT_S"}},
		{Name: "dtq_queues", Meant: []string{"DTQ_QUEUES"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Misspelt =\n%+v\nwant\n%+v", got, want)
	}
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"ABC", "ABC", 0}, {"ABC", "AB", 1}, {"ABC", "AXC", 1}, {"ABC", "BAC", 2},
		{"ABCDEF", "ABC", 3}, {"QUEUE", "QUEUES", 1}, {"KITTEN", "SITTING", 3},
	} {
		if got := EditDistance(c.a, c.b); got != c.want {
			t.Errorf("EditDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
