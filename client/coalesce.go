package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// coalescer gathers concurrent requests of one kind (admit, settle or
// release) into batch messages: the transport under Client.request, which
// keeps every caller's request, retries, idempotency and errors as they
// are. A request arriving when no message of its kind is in flight is sent
// at once, alone, on the single subject: a lone caller waits for nothing.
// Otherwise it waits at most the linger for others to join it (or until
// maxItems have), and the gathered items travel as one batch request
// (events.BatchRequest) whose answers are handed back item by item.
type coalescer struct {
	c             *Client
	single, batch string
	linger        time.Duration
	maxItems      int
	// onAbandoned, if set, is called with the answer of an item whose
	// caller gave up while it was in flight (admit: release what it
	// reserved).
	onAbandoned func(answer *nats.Msg)
	// noBatch is set when the batch subject had no responders (a service
	// without batch endpoints): items then go one by one.
	noBatch atomic.Bool

	mu       sync.Mutex
	pending  []*citem
	timer    *time.Timer
	inflight int // messages sent and not yet answered
}

// citem is one request waiting in or travelling with a batch.
type citem struct {
	data []byte
	done chan struct{}
	// answer and err are set before done is closed.
	answer *nats.Msg
	err    error
	// sent, abandoned and finished are guarded by the coalescer's mu.
	sent, abandoned, finished bool
}

func newCoalescer(c *Client, endpoint, batchEndpoint string) *coalescer {
	return &coalescer{c: c, single: c.layout.Endpoint(endpoint), batch: c.layout.Endpoint(batchEndpoint),
		linger: c.linger, maxItems: c.maxItems}
}

// errAttemptTimeout is the cause of an attempt that got no answer within
// the client's timeout.
var errAttemptTimeout = context.DeadlineExceeded

// do sends data as one attempt and returns the answer of its request (the
// body the single endpoint would reply, with its headers on a single
// send). The attempt waits at most the client's timeout; ctx is the whole
// request's: when it ends first, the item is taken out of a batch not yet
// sent (never made), or marked abandoned so that its late answer is given
// to onAbandoned. last says that no attempt follows this one: if it times
// out, its late answer is abandoned too.
func (k *coalescer) do(ctx context.Context, data []byte, last bool) (*nats.Msg, error) {
	it := &citem{data: data, done: make(chan struct{})}
	k.mu.Lock()
	k.pending = append(k.pending, it)
	switch {
	case k.inflight == 0 || len(k.pending) >= k.maxItems:
		k.flushLocked()
	case len(k.pending) == 1:
		if k.timer == nil {
			k.timer = time.AfterFunc(k.linger, k.lingerDone)
		} else {
			k.timer.Reset(k.linger)
		}
	}
	k.mu.Unlock()
	t := time.NewTimer(k.c.timeout)
	defer t.Stop()
	select {
	case <-it.done:
		return it.answer, it.err
	case <-t.C:
		// Unless this is the last attempt, another follows with the same
		// request, whose answer is the same reservation's: this attempt's
		// late answer is then not abandoned.
		if !last {
			return nil, fmt.Errorf("no reply within %s: %w", k.c.timeout, errAttemptTimeout)
		}
	case <-ctx.Done():
	}
	k.mu.Lock()
	if it.finished {
		// The answer came as the caller gave up: it is the caller's.
		k.mu.Unlock()
		return it.answer, it.err
	}
	if !it.sent {
		for i, p := range k.pending {
			if p == it {
				k.pending = append(k.pending[:i], k.pending[i+1:]...)
				break
			}
		}
		k.mu.Unlock()
		return nil, ctx.Err()
	}
	it.abandoned = true
	k.mu.Unlock()
	if ctx.Err() == nil {
		return nil, fmt.Errorf("no reply within %s: %w", k.c.timeout, errAttemptTimeout)
	}
	return nil, ctx.Err()
}

// lingerDone sends what gathered during the linger.
func (k *coalescer) lingerDone() {
	k.mu.Lock()
	if len(k.pending) > 0 {
		k.flushLocked()
	}
	k.mu.Unlock()
}

// flushLocked sends the pending items as one message; k.mu is held.
func (k *coalescer) flushLocked() {
	items := k.pending
	k.pending = nil
	if k.timer != nil {
		k.timer.Stop()
	}
	for _, it := range items {
		it.sent = true
	}
	k.inflight++
	go k.send(items)
}

// send sends items and hands each its answer.
func (k *coalescer) send(items []*citem) {
	defer func() {
		k.mu.Lock()
		k.inflight--
		k.mu.Unlock()
	}()
	if len(items) == 1 {
		msg, err := k.request(k.single, items[0].data)
		k.finish(items[0], msg, err)
		return
	}
	if k.noBatch.Load() {
		var wg sync.WaitGroup
		for _, it := range items {
			wg.Add(1)
			go func() {
				defer wg.Done()
				msg, err := k.request(k.single, it.data)
				k.finish(it, msg, err)
			}()
		}
		wg.Wait()
		return
	}
	bodies := make([][]byte, len(items))
	for i, it := range items {
		bodies[i] = it.data
	}
	msg, err := k.request(k.batch, events.EncodeBatchReply(bodies))
	if errors.Is(err, nats.ErrNoResponders) {
		// No service answers batches here (or none at all): send the items
		// one by one, and keep doing so for a while.
		k.noBatch.Store(true)
		time.AfterFunc(noBatchRecheck, func() { k.noBatch.Store(false) })
		for _, it := range items {
			m, err := k.request(k.single, it.data)
			k.finish(it, m, err)
		}
		return
	}
	if err != nil || (msg.Header != nil && msg.Header.Get(microErrorHeader) != "") {
		// No answer, or the batch refused as a whole (the service's in-flight
		// limit): every item gets that.
		for _, it := range items {
			k.finish(it, msg, err)
		}
		return
	}
	answers, err := events.DecodeBatchReply(msg.Data)
	if err != nil || len(answers) != len(items) {
		if err == nil {
			err = fmt.Errorf("%d answers to %d items", len(answers), len(items))
		}
		err = &UnavailableError{Subject: k.batch, Code: events.CodeInternal, Message: fmt.Sprintf("undecodable batch reply: %v", err), Err: err}
		for _, it := range items {
			k.finish(it, nil, err)
		}
		return
	}
	for i, it := range items {
		k.finish(it, &nats.Msg{Subject: msg.Subject, Data: answers[i]}, nil)
	}
}

// request is one request-reply on the connection, bounded by the client's
// timeout.
func (k *coalescer) request(subject string, data []byte) (*nats.Msg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), k.c.timeout)
	defer cancel()
	return k.c.nc.RequestWithContext(ctx, subject, data)
}

// finish hands it its answer, or gives the answer to onAbandoned if its
// caller is gone.
func (k *coalescer) finish(it *citem, msg *nats.Msg, err error) {
	k.mu.Lock()
	it.answer, it.err, it.finished = msg, err, true
	abandoned := it.abandoned
	k.mu.Unlock()
	close(it.done)
	if abandoned && err == nil && k.onAbandoned != nil {
		k.onAbandoned(msg)
	}
}

// noBatchRecheck is how long a client whose batch request found no
// responders sends items one by one before it tries a batch again.
const noBatchRecheck = 10 * time.Second

// microErrorHeader is micro's error header (micro.ErrorHeader).
const microErrorHeader = "Nats-Service-Error"

// coalescedEndpoints maps the endpoints whose calls are coalesced to their
// batch endpoints.
var coalescedEndpoints = map[string]string{
	streams.EndpointAdmit:   streams.EndpointAdmitBatch,
	streams.EndpointSettle:  streams.EndpointSettleBatch,
	streams.EndpointRelease: streams.EndpointReleaseBatch,
}
