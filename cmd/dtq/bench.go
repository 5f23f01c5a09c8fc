package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// modulePath is the module whose source tree `dtq bench` runs in.
const modulePath = "github.com/dtq/dtq"

// runBench runs `dtq bench ARGS` as `go run ./bench ARGS` at the root of the dtq source
// tree that holds the working directory, replacing this process (signals and the exit
// status are the benchmark's). The benchmarks build the worker and scaler from that
// tree, so they need it and the Go toolchain; an installed dtq binary alone cannot run
// them.
func runBench(args []string) int {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq bench: %v\n", err)
		return exitFail
	}
	root, err := moduleRoot(wd)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq bench: %v; run it inside the dtq source tree (it runs go run ./bench there)\n", err)
		return exitFail
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq bench: the Go toolchain (go) is not on PATH: it runs go run ./bench in %s\n", root)
		return exitFail
	}
	if err := os.Chdir(root); err != nil {
		fmt.Fprintf(os.Stderr, "dtq bench: %v\n", err)
		return exitFail
	}
	err = syscall.Exec(goBin, append([]string{"go", "run", "./bench"}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "dtq bench: exec %s: %v\n", goBin, err)
	return exitFail
}

// moduleRoot returns the nearest directory at or above dir whose go.mod declares
// modulePath.
func moduleRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if m, err := moduleOf(filepath.Join(d, "go.mod")); err == nil && m == modulePath {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of %s at or above %s", modulePath, dir)
		}
	}
}

// moduleOf reads the module path a go.mod declares.
func moduleOf(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", errors.New("no module line")
}
