package gateway

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// NoteGatewayShutdown is the settle note of a call the gateway cut at its
// shutdown timeout (Drain) without a usage to settle from: its caller was
// still there, so the call is not the caller's doing (caller_gone).
const NoteGatewayShutdown = "reservation_" + OutcomeShutdown

// drainCutWait bounds how long Drain waits for the calls it cut to close.
const drainCutWait = 30 * time.Second

// drainState counts the calls being handled and, once Drain began,
// refuses new ones; at the shutdown timeout it cuts those left.
type drainState struct {
	mu       sync.Mutex
	draining bool
	// cut: the calls in flight were cut; a call that reaches its
	// upstream after it is cut at once.
	cut bool
	n   int
	// idle is closed once draining and no call is left.
	idle    chan struct{}
	cancels map[uint64]context.CancelCauseFunc
	next    uint64
}

// enter counts a call in, or reports false while draining.
func (d *drainState) enter() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.draining {
		return false
	}
	d.n++
	return true
}

// leave counts a call out.
func (d *drainState) leave() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n--
	d.idleIfDone()
}

func (d *drainState) idleIfDone() {
	if d.draining && d.n == 0 && d.idle != nil {
		close(d.idle)
		d.idle = nil
	}
}

// track registers the cancel of a call's upstream request, for cutAll;
// the returned func unregisters it.
func (d *drainState) track(cancel context.CancelCauseFunc) func() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		cancel(errGatewayShutdown)
		return func() {}
	}
	if d.cancels == nil {
		d.cancels = map[uint64]context.CancelCauseFunc{}
	}
	id := d.next
	d.next++
	d.cancels[id] = cancel
	return func() {
		d.mu.Lock()
		delete(d.cancels, id)
		d.mu.Unlock()
	}
}

// begin starts draining: it returns a channel closed once no call is
// left, and the calls in flight now.
func (d *drainState) begin() (<-chan struct{}, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	idle := make(chan struct{})
	if !d.draining {
		d.draining, d.idle = true, idle
		d.idleIfDone()
	} else if d.idle == nil {
		close(idle) // a second Drain: already idle
	} else {
		idle = d.idle
	}
	return idle, d.n
}

// cutAll cuts every call's upstream request with errGatewayShutdown and
// returns how many it cut.
func (d *drainState) cutAll() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = true
	for id, cancel := range d.cancels {
		cancel(errGatewayShutdown)
		delete(d.cancels, id)
	}
	return d.n
}

// Drain shuts the proxy down gracefully: from its call on, each new call
// is refused 503 gateway_draining (never sent upstream: the SDKs retry
// it, reaching another gateway behind the load balancer), and Drain
// waits for the calls in flight to run to their end. If ctx ends first
// (the shutdown timeout), it cuts the calls left: a stream ends in the
// provider's error event gateway_shutdown, a call still waiting for its
// answer is answered 503 gateway_shutdown, and each is closed as a call
// cut (at its whole reservation, note NoteGatewayShutdown, unless its
// usage was known; released if it never reached the upstream), never as
// its caller's doing. Drain then returns once they are closed, at most
// drainCutWait later. Call Wait after it, once the listener is stopped.
func (g *Gateway) Drain(ctx context.Context) {
	idle, n := g.dr.begin()
	g.log.Info("gateway: draining: new calls are refused 503 gateway_draining; the calls in flight run to their end", "calls", n)
	select {
	case <-idle:
		return
	case <-ctx.Done():
	}
	n = g.dr.cutAll()
	g.log.Warn("gateway: the shutdown timeout passed with calls in flight: cutting them; each is charged its reservation (settle note "+NoteGatewayShutdown+")",
		"calls", n)
	select {
	case <-idle:
	case <-time.After(drainCutWait):
		g.log.Error("gateway: calls still running after they were cut at shutdown; the journal or their reservation's TTL closes them", "wait", drainCutWait.String())
	}
}

// errDraining answers a call that comes while the gateway drains.
var errDraining = &callError{status: http.StatusServiceUnavailable, typ: "server_error", code: "gateway_draining", retryAfter: 1,
	msg: "spendgate: this gateway is shutting down and takes no new calls; retry (another gateway answers)"}
