package testutil

import (
	"bytes"
	"sync"
)

// SyncBuffer collects output written by several goroutines (a child process's stdout and stderr
// copiers) and reads it safely while they write.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
