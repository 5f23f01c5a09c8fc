// Package syncbuf is a bytes.Buffer that several goroutines may write and read at once:
// where tests collect a logger's or a process's output while it runs.
package syncbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer collects writes; the zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Contains reports whether what was written so far contains sub.
func (s *Buffer) Contains(sub string) bool { return strings.Contains(s.String(), sub) }
