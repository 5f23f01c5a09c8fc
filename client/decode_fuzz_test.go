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
