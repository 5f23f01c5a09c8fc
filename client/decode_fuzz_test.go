package client_test

import (
	"strconv"
	"testing"

	"github.com/dtq/dtq/client"
)

// DecodeTask reads task records written by anyone: it never fails, keeps text fields as
// they are, and reads a number field that does not parse as 0.
func FuzzDecodeTask(f *testing.F) {
	f.Add("queued", "0", "5", "0", "3", "1700000000000", "{}", "")
	f.Add("zzz", "abc", "99", "-1", "lots", "yesterday", "\x00\xff", `{"foo":"bar"}`)
	f.Add("", "9223372036854775808", "-9223372036854775809", "1e3", "0x10", " 1", "", "")
	f.Fuzz(func(t *testing.T, status, attempt, priority, failures, maxRetries, created, payload, raw string) {
		h := map[string]string{"status": status, "attempt": attempt, "priority": priority, "failures": failures,
			"max_retries": maxRetries, "created_at": created, "payload": payload, "raw": raw}
		ti := client.DecodeTask(h)
		if string(ti.Status) != status || ti.Payload != payload || ti.Raw != raw {
			t.Fatalf("text fields changed: %+v", ti)
		}
		for name, c := range map[string]struct {
			in  string
			got int64
		}{"attempt": {attempt, ti.Attempt}, "failures": {failures, ti.Failures}, "max_retries": {maxRetries, ti.MaxRetries}, "created_at": {created, ti.CreatedAt}} {
			want, err := strconv.ParseInt(c.in, 10, 64)
			if err != nil {
				want = 0
			}
			if c.got != want {
				t.Fatalf("%s %q read as %d, want %d", name, c.in, c.got, want)
			}
		}
	})
}

// The timeout, the retries and the creation time come from the record's spec (enqueue.lua
// keeps them there alone), or from fields of their own where a record has them.
func TestDecodeTaskReadsSpecOrFields(t *testing.T) {
	for _, c := range []struct {
		h                  map[string]string
		tmo, maxr, created int64
	}{
		{map[string]string{"spec": "30000 5 1700000000000 1 send mail"}, 30000, 5, 1700000000000},
		{map[string]string{"spec": "0 -1 17 0 f", "max_retries": "2", "created_at": "9", "timeout_ms": "7"}, 7, 2, 9},
		{map[string]string{"max_retries": "4", "created_at": "8", "timeout_ms": "6"}, 6, 4, 8},
		{map[string]string{"spec": "1 x"}, 1, 0, 0},
		{map[string]string{"spec": ""}, 0, 0, 0},
		{map[string]string{}, 0, 0, 0},
	} {
		ti := client.DecodeTask(c.h)
		if ti.TimeoutMS != c.tmo || ti.MaxRetries != c.maxr || ti.CreatedAt != c.created {
			t.Errorf("DecodeTask(%v) = timeout %d, retries %d, created %d; want %d, %d, %d",
				c.h, ti.TimeoutMS, ti.MaxRetries, ti.CreatedAt, c.tmo, c.maxr, c.created)
		}
	}
}
