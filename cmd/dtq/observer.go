package main

// observerBinary is the observer's own binary, next to dtq or on PATH.
const observerBinary = "dtq-observer"

// runObserver runs `dtq observer` by replacing this process with dtq-observer: the
// observer's HTTP API lives in a binary of its own, so the worker binary carries none of it.
func runObserver(args []string) int { return execSibling("observer", observerBinary, args) }
