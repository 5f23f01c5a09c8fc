package keys

import "fmt"

// Keys of periodic (cron) entries:
//
//	PREFIX:cron                     hash: entry name → the entry's JSON definition
//	PREFIX:{Q}:cron                 zset: entry name → its next tick (unix ms), entries of queue Q not paused

// Cron is the hash of every periodic entry's definition, by name.
func (s Space) Cron() string { return s.prefix + ":cron" }

// Cron is the zset of this queue's periodic entries that are not paused, scored by
// their next tick (unix ms).
func (q Queue) Cron() string { return q.base + "cron" }

// MaxCronName is the longest periodic entry name: the ids of its tasks,
// "cron-NAME-TICKMS", stay well within a task id's 128 bytes.
const MaxCronName = 64

// ValidCronName reports whether name is an acceptable periodic entry name:
// [A-Za-z0-9_.-]{1,64}.
func ValidCronName(name string) error {
	if len(name) > MaxCronName {
		return fmt.Errorf("cron entry name is %d bytes, more than %d", len(name), MaxCronName)
	}
	if len(name) == 0 || !NameChars(name, "_.-") {
		return fmt.Errorf("cron entry name %q must match [A-Za-z0-9_.-]{1,64}", name)
	}
	return nil
}
