//go:build unix

package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockFile is the name of the lock file Start keeps in the data dir. It
// holds the owner's process id; the lock itself is a flock(2) on it, so it
// dies with its process and a stale file never blocks a restart.
const LockFile = "spendgate.lock"

// dirLock is a held data dir lock.
type dirLock struct{ f *os.File }

// lockDir creates dir if needed and takes an exclusive, non-blocking
// flock on dir/LockFile, then writes this process's pid into it.
func lockDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded: data dir %s cannot be created: %w", dir, err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("embedded: data dir %s is not writable: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("embedded: %w: %s is locked by process %s (lock file %s); stop it or choose another data dir",
				ErrDataDirInUse, dir, holder(path), path)
		}
		return nil, fmt.Errorf("embedded: lock data dir %s: %w", dir, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt(pid, 0)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("embedded: data dir %s is not writable: %w", dir, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("embedded: data dir %s is not writable: %w", dir, err)
	}
	return &dirLock{f: f}, nil
}

// holder reads the pid the lock's holder wrote, or says why it cannot.
func holder(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(unknown: " + err.Error() + ")"
	}
	pid := strings.TrimSpace(string(data))
	if pid == "" {
		return "(unknown: the lock file is empty)"
	}
	return pid
}

// unlock releases the lock. The file stays: removing it would race with a
// next owner that opened it already.
func (l *dirLock) unlock() {
	if l == nil || l.f == nil {
		return
	}
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
}
