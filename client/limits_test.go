package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in  string
		n   int
		per time.Duration
	}{{"100/s", 100, time.Second}, {"5000/h", 5000, time.Hour}, {"10/m", 10, time.Minute},
		{"10/1m", 10, time.Minute}, {"5/30s", 5, 30 * time.Second}, {"1/500ms", 1, 500 * time.Millisecond}} {
		n, per, err := client.ParseRate(c.in)
		if err != nil || n != c.n || per != c.per {
			t.Errorf("ParseRate(%q) = %d, %v, %v; want %d, %v", c.in, n, per, err, c.n, c.per)
		}
	}
	for _, bad := range []string{"", "100", "0/s", "-1/s", "x/s", "100/d", "100/", "1/0s", "1/25h",
		"100001/s", "1000/1ms", "1/1.5ms"} {
		if _, _, err := client.ParseRate(bad); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("ParseRate(%q): %v, want ErrInvalid", bad, err)
		}
	}
}

func TestSetLimitRefusesBadInput(t *testing.T) {
	t.Parallel()
	c, rdb, ks := cronSetup(t, cronNow)
	ctx := context.Background()
	for name, l := range map[string]client.Limit{
		"nothing":          {},
		"zero":             {Rate: 0, Concurrency: 0},
		"negative conc":    {Concurrency: -1},
		"negative rate":    {Rate: -1, Per: time.Second},
		"negative burst":   {Rate: 1, Per: time.Second, Burst: -1},
		"rate without per": {Rate: 5},
		"burst alone":      {Burst: 3, Concurrency: 1},
		"too fast":         {Rate: 200000, Per: time.Second},
		"too long":         {Rate: 1, Per: 48 * time.Hour},
		"huge conc":        {Concurrency: 2000000},
		"huge burst":       {Rate: 1, Per: time.Second, Burst: 1000000},
		"bad function":     {Function: "a b", Concurrency: 1},
		"function with ;":  {Function: "a;conc=9", Concurrency: 1},
	} {
		if err := c.SetLimit(ctx, "lq", l); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("%s: SetLimit(%+v) = %v, want ErrInvalid", name, l, err)
		}
	}
	if err := c.SetLimit(ctx, "", client.Limit{Concurrency: 1}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("empty queue: %v", err)
	}
	if n := rdb.Exists(ctx, ks.Queue("lq").Limits()).Val(); n != 0 {
		t.Fatal("a refused limit was written")
	}
}

func TestSetListRemoveLimit(t *testing.T) {
	t.Parallel()
	c, rdb, ks := cronSetup(t, cronNow)
	ctx := context.Background()
	if err := c.SetLimit(ctx, "lq", client.Limit{Rate: 100, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetLimit(ctx, "lq", client.Limit{Function: "send_email", Concurrency: 5, Rate: 5000, Per: time.Hour, Burst: 10}); err != nil {
		t.Fatal(err)
	}
	q := ks.Queue("lq")
	if d := rdb.HGet(ctx, q.Limits(), "").Val(); d != "rate=100;per=1000;burst=1" {
		t.Fatalf("queue definition %q", d)
	}
	if d := rdb.HGet(ctx, q.Limits(), "send_email").Val(); d != "rate=5000;per=3600000;burst=10;conc=5" {
		t.Fatalf("function definition %q", d)
	}
	rdb.SAdd(ctx, q.LimitRun("send_email"), "t1", "t2")
	ls, err := c.Limits(ctx, "lq")
	if err != nil || len(ls) != 2 {
		t.Fatalf("Limits = %+v, %v", ls, err)
	}
	if ls[0].Function != "" || ls[0].Rate != 100 || ls[0].Burst != 1 || ls[1].Function != "send_email" ||
		ls[1].Concurrency != 5 || ls[1].Running != 2 || ls[1].Per != time.Hour {
		t.Fatalf("Limits = %+v", ls)
	}
	if err := c.RemoveLimit(ctx, "lq", "send_email"); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, q.LimitRun("send_email")).Val() != 0 {
		t.Fatal("state of a removed limit kept")
	}
	if err := c.RemoveLimit(ctx, "lq", "send_email"); !errors.Is(err, client.ErrLimitNotFound) {
		t.Fatalf("second remove: %v", err)
	}
	// a definition written by hand that does not decode is listed with its error
	rdb.HSet(ctx, q.Limits(), "f", "conc=x")
	ls, err = c.Limits(ctx, "lq")
	if err != nil || len(ls) != 2 || ls[1].Error == "" {
		t.Fatalf("Limits with a bad definition = %+v, %v", ls, err)
	}
}
