//go:build !unix

package embedded

import (
	"fmt"
	"runtime"
)

// LockFile is the name of the lock file Start keeps in the data dir.
const LockFile = "spendgate.lock"

// dirLock is a held data dir lock.
type dirLock struct{}

// lockDir refuses: without flock(2) the data dir cannot be locked, and an
// unlocked store can be opened twice and lose acknowledged writes.
func lockDir(dir string) (*dirLock, error) {
	return nil, fmt.Errorf("embedded: data dir %s: locking is not implemented on %s", dir, runtime.GOOS)
}

func (l *dirLock) unlock() {}
