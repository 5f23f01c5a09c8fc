package lua

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// RawReply runs script s with a on c and returns its reply undecoded, for tests of a
// reply's shape.
func RawReply[A, R any](ctx context.Context, c redis.Scripter, s *Script[A, R], a A) (any, error) {
	ks, args, err := s.kv(a)
	if err != nil {
		return nil, err
	}
	return s.run(ctx, c, ks, args...).Result()
}
