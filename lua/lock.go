package lua

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lock_renew.lua
	lockRenewSrc string
	//go:embed lock_release.lua
	lockReleaseSrc string
)

// LockRenew extends a lock by TTLMS while it holds Token (lock_renew.lua); it replies
// whether it did.
var LockRenew = newScript("lock_renew.lua", plain(lockRenewSrc),
	func(a LockArgs) ([]string, []any, error) { return []string{a.Lock}, []any{a.Token, a.TTLMS}, nil },
	decodeLock("lock renew"))

// LockRelease deletes a lock while it holds Token (lock_release.lua); it replies
// whether it did.
var LockRelease = newScript("lock_release.lua", plain(lockReleaseSrc),
	func(a LockArgs) ([]string, []any, error) { return []string{a.Lock}, []any{a.Token}, nil },
	decodeLock("lock release"))

// LockArgs names a lock, the token its holder set, and (LockRenew) its new TTL.
type LockArgs struct {
	Lock  string
	Token string
	TTLMS int64
}

func decodeLock(op string) func(LockArgs, *redis.Cmd) (bool, error) {
	return func(_ LockArgs, cmd *redis.Cmd) (bool, error) {
		n, err := cmd.Int64()
		if err != nil {
			return false, fmt.Errorf("%s: %w", op, err)
		}
		return n == 1, nil
	}
}
