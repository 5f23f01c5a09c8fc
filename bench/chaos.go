package main

import (
	"context"
	"errors"
)

// runChaos is filled in with the chaos harness.
func runChaos(ctx context.Context, e *benchEnv, o options) (result, error) {
	return nil, errors.New("chaos: not available yet")
}
