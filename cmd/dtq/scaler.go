package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// scalerBinary is the scaler's own binary, next to dtq or on PATH.
const scalerBinary = "dtq-scaler"

// runScaler runs `dtq scaler` by replacing this process with dtq-scaler. The scaler is
// a binary of its own so that this one, the worker started on every scale-up, stays small.
func runScaler(args []string) int { return execSibling("scaler", scalerBinary, args) }

// execSibling runs `dtq <command>` by replacing this process with binary (same
// arguments, same environment, same pid: signals reach it directly), found next to
// dtq or else on PATH. It returns only when the exec failed.
func execSibling(command, binary string, args []string) int {
	path, err := sibling(binary)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dtq %s: %v\n", command, err)
		return exitFail
	}
	err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "dtq %s: exec %s: %v\n", command, path, err)
	return exitFail
}

// sibling finds binary next to dtq, or else on PATH.
func sibling(binary string) (string, error) {
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), binary); isFile(p) {
			return p, nil
		}
	}
	p, err := exec.LookPath(binary)
	if err != nil {
		return "", fmt.Errorf("%s is neither next to dtq nor on PATH (go build -o DIR ./cmd/%s)", binary, binary)
	}
	return p, nil
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
