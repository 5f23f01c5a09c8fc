package liveness

import (
	"context"
	"testing"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestPruneDropsExpiredWorkers(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := srv.Client(t)
	ctx := context.Background()
	ks := keys.New(redistest.Prefix(t))
	c.SAdd(ctx, ks.Workers(), "alive", "gone")
	c.HSet(ctx, ks.Worker("alive"), FieldStatus, string(Ready))
	n, err := Prune(ctx, c, ks)
	if err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1", n, err)
	}
	if ids := c.SMembers(ctx, ks.Workers()).Val(); len(ids) != 1 || ids[0] != "alive" {
		t.Fatalf("workers = %v, want [alive]", ids)
	}
}
