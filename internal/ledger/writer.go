package ledger

import (
	"sync"

	"github.com/nats-io/nats.go"
)

// writer is the NATS connection the ledger's writes travel on (each lane
// revision's compare-and-set publish, and every message of an atomic
// batch) while Run runs: a connection of their own, dialled from the
// replica's connection's options (the same servers, credentials and, for
// an embedded server, the same in-process pipe).
//
// On the replica's one connection a write and its ack queued behind
// everything else the replica sends and receives: the callers' requests
// and batch messages coming in, their replies going out, and the
// follower's delivery of every revision. A hot budget's commits are
// serial (each waits for the previous one's ack), so that queueing was
// paid once per commit: on hot64 the publish round trip took about 280 µs
// at p50 on the shared connection and 145 µs on its own one (hot1: 34 µs
// and 26 µs). Reads (catch-up, the leader checks) stay on the replica's
// connection: they are off the hot path.
type writer struct {
	// mu is read-held by every write for its whole exchange, so that
	// closing the connection (Run's end) waits for the writes in flight;
	// a write that starts after it goes on the replica's connection.
	mu sync.RWMutex
	nc *nats.Conn // nil: writes go on Ledger.nc
}

// openWriter dials the writer connection. A replica that cannot open it
// writes on its own connection, as before, and says so.
func (l *Ledger) openWriter() {
	if !l.opts.ownWriter {
		return
	}
	o := l.nc.Opts
	o.Name = o.Name + " (ledger writes)"
	// The callbacks belong to the replica's connection (serve's closes a
	// channel when its connection closes); this one reports nothing.
	o.ClosedCB, o.DisconnectedCB, o.DisconnectedErrCB, o.ConnectedCB = nil, nil, nil, nil
	o.ReconnectedCB, o.DiscoveredServersCB, o.AsyncErrorCB, o.ReconnectErrCB = nil, nil, nil, nil
	o.LameDuckModeHandler = nil
	nc, err := o.Connect()
	if err != nil {
		l.opts.log.Warn("ledger: no connection of its own for writes; writing on the replica's connection", "err", err)
		return
	}
	l.w.mu.Lock()
	l.w.nc = nc
	l.w.mu.Unlock()
}

// closeWriter closes the writer connection once the writes in flight on it
// have their answers; later writes go on the replica's connection.
func (l *Ledger) closeWriter() {
	l.w.mu.Lock()
	nc := l.w.nc
	l.w.nc = nil
	l.w.mu.Unlock()
	if nc != nil {
		nc.Close()
	}
}

// writeConn returns the connection for a write and the function that ends
// the write (call it once the write's answer is in).
func (l *Ledger) writeConn() (*nats.Conn, func()) {
	l.w.mu.RLock()
	if nc := l.w.nc; nc != nil {
		return nc, l.w.mu.RUnlock
	}
	l.w.mu.RUnlock()
	return l.nc, func() {}
}
