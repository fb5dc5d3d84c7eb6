package testenv

import (
	"bytes"
	"sync"
)

// LogBuffer is a bytes.Buffer that goroutines may write while a test
// reads it: the destination of a slog handler, or of a child process's
// output, whose lines the test then looks for. The zero value is ready.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
