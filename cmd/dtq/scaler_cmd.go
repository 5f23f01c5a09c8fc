package main

import (
	"fmt"
	"os"
)

// runScaler runs `dtq scaler`.
func runScaler(args []string) int {
	fmt.Fprintln(os.Stderr, "dtq scaler: not built yet")
	return 1
}
