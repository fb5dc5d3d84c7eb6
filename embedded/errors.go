package embedded

import "errors"

// ErrDataDirInUse is returned by Start when another server, in this
// process or another, holds the data dir's lock. The error wrapping it
// names the holder's process id.
var ErrDataDirInUse = errors.New("data dir in use")

// ErrNotReady is returned by Start and WaitJetStream when the server did
// not become ready within the bound and reported no cause of its own.
var ErrNotReady = errors.New("not ready")
