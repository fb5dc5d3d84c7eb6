package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/streams"
)

// coalescer gathers concurrent admits, settles and releases into batch
// messages: the transport under Client.request, which keeps every
// caller's request, retries, idempotency and errors as they are. A request
// arriving when no message is in flight is sent at once, alone, on its
// endpoint's subject: a lone caller waits for nothing. (Except right
// after a batch was answered, when its callers' next calls are expected
// within the linger: they are gathered until all of them have come, or
// the linger has passed.) Otherwise it waits at most the linger for
// others to join it (or until maxItems have), and the gathered items
// travel as one batch request (events.BatchRequest) whose answers are
// handed back item by item: on the kind's batch endpoint (admit.batch)
// when they are all of one kind, else on the mixed one (batch), so that
// callers admitting and settling at once share messages.
type coalescer struct {
	c *Client
	// subjects are each kind's single and batch subjects; mixed is the
	// mixed batch's.
	subjects map[string]kindSubjects
	mixed    string
	linger   time.Duration
	maxItems int
	// onAbandoned, if set, is called with the answer of an admit whose
	// caller gave up while it was in flight (release what it reserved).
	onAbandoned func(answer *nats.Msg)
	// noBatch is set when a batch subject had no responders (a service
	// without batch endpoints): items then go one by one. noMixed is set
	// when the mixed batch subject had none (a service without it):
	// items then go in a batch per kind.
	noBatch, noMixed atomic.Bool

	// followers are the callers of the batches just answered, who may
	// still be making their next call: until they have, or the linger has
	// passed, a call waits for them even if nothing is in flight.
	followers *returning

	mu           sync.Mutex
	pending      []*citem
	pendingBytes int // the bodies of pending, with a separator each
	timer        *time.Timer
	inflight     int // messages sent and not yet answered
}

// kindSubjects are the subjects of one kind of request: alone, and in a
// batch of its kind.
type kindSubjects struct{ single, batch string }

// citem is one request waiting in or travelling with a batch.
type citem struct {
	kind string // its endpoint: admit, settle or release
	data []byte
	done chan struct{}
	// answer and err are set before done is closed.
	answer *nats.Msg
	err    error
	// sent, abandoned and finished are guarded by the coalescer's mu.
	sent, abandoned, finished bool
}

// returning tracks, for all of a client's coalescers, the callers of the
// batches answered within the last linger: their next calls (an admit's
// settle) are expected at once, so a call waits for them rather than go
// out alone; once as many calls have arrived as callers were answered,
// waiting longer gathers nobody, and what is pending goes at once.
type returning struct {
	// until is when the wait ends (unix nanoseconds), whoever came.
	until atomic.Int64
	// left is how many answered callers have not called again (an
	// estimate: any call counts as one of them).
	left atomic.Int64
}

// answered records n callers answered now, expected back within linger.
func (r *returning) answered(n int, linger time.Duration) {
	now := time.Now()
	if now.UnixNano() >= r.until.Load() {
		r.left.Store(int64(n))
	} else {
		r.left.Add(int64(n))
	}
	r.until.Store(now.Add(linger).UnixNano())
}

// waiting reports whether calls should wait for answered callers: the
// linger since the last answer has not passed.
func (r *returning) waiting(now int64) bool { return now < r.until.Load() }

// arrived counts a call made while waiting; it reports whether it was the
// last one expected.
func (r *returning) arrived() bool { return r.left.Add(-1) == 0 }

func newCoalescer(c *Client) *coalescer {
	k := &coalescer{c: c, subjects: map[string]kindSubjects{}, mixed: c.layout.Endpoint(streams.EndpointBatch),
		linger: c.linger, maxItems: c.maxItems, followers: &returning{}}
	for endpoint, batch := range coalescedEndpoints {
		k.subjects[endpoint] = kindSubjects{c.layout.Endpoint(endpoint), c.layout.Endpoint(batch)}
	}
	return k
}

// errAttemptTimeout is the cause of an attempt that got no answer within
// the client's timeout.
var errAttemptTimeout = context.DeadlineExceeded

// do sends data, a request of endpoint kind, as one attempt and returns
// the answer of its request (the body the single endpoint would reply,
// with its headers on a single send). The attempt waits at most the client's timeout; ctx is the whole
// request's: when it ends first, the item is taken out of a batch not yet
// sent (never made), or marked abandoned so that its late answer is given
// to onAbandoned.
func (k *coalescer) do(ctx context.Context, kind string, data []byte) (*nats.Msg, error) {
	it := &citem{kind: kind, data: data, done: make(chan struct{})}
	k.mu.Lock()
	if len(k.pending) > 0 && k.pendingBytes+itemBytes(data)+batchOverhead > k.maxBytes() {
		// It would make the batch too large for the service or the
		// connection: what is waiting goes now, and it starts the next.
		k.flushLocked()
	}
	k.pending = append(k.pending, it)
	k.pendingBytes += itemBytes(data)
	waiting := k.followers.waiting(time.Now().UnixNano())
	last := waiting && k.followers.arrived()
	switch {
	case len(k.pending) >= k.maxItems || (k.inflight == 0 && !waiting):
		k.flushLocked()
	case last:
		// Every caller expected back is: send what they gathered.
		k.flushLocked()
	case len(k.pending) == 1:
		if k.timer == nil {
			k.timer = time.AfterFunc(k.linger, k.lingerDone)
		} else {
			k.timer.Reset(k.linger)
		}
	}
	k.mu.Unlock()
	// The message's own timeout (the client's, from when it is sent)
	// bounds the wait: it completes every item of a message that got no
	// answer.
	select {
	case <-it.done:
		return it.answer, it.err
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
				k.pendingBytes -= itemBytes(it.data)
				break
			}
		}
		k.mu.Unlock()
		return nil, ctx.Err()
	}
	it.abandoned = true
	k.mu.Unlock()
	return nil, ctx.Err()
}

// batchOverhead is the envelope's share of a batch message.
const batchOverhead = len(`{"items":[]}`)

// itemBytes is an item's share of a batch message at most: its body, the
// mixed batch's wrapping and a separator.
func itemBytes(data []byte) int { return len(data) + codec.MixedItemOverhead + 1 }

// maxBytes is the largest batch message: the service's limit, or the
// connection's max payload if smaller.
func (k *coalescer) maxBytes() int {
	n := events.MaxBatchPayloadBytes
	if mp := k.c.nc.MaxPayload(); mp > 0 && int(mp) < n {
		n = int(mp)
	}
	return n
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
	k.pending, k.pendingBytes = nil, 0
	if k.timer != nil {
		k.timer.Stop()
	}
	for _, it := range items {
		it.sent = true
	}
	k.inflight++
	if k.noBatch.Load() && len(items) > 1 {
		// One message per item, each counted in flight.
		k.inflight += len(items) - 1
		for _, it := range items {
			k.send([]*citem{it})
		}
		return
	}
	k.send(items)
}

// flight is a message sent and not yet answered.
type flight struct {
	k            *coalescer
	subject      string
	items        []*citem
	batch, mixed bool
	timer        *time.Timer
}

// byKind splits items into runs of one kind each (in the order of their
// kinds' first items), each run in its items' order; ok is false if they
// are all of one kind.
func byKind(items []*citem) (runs [][]*citem, ok bool) {
	at := map[string]int{}
	for _, it := range items {
		i, seen := at[it.kind]
		if !seen {
			i = len(runs)
			at[it.kind] = i
			runs = append(runs, nil)
		}
		runs[i] = append(runs[i], it)
	}
	return runs, len(runs) > 1
}

// send publishes items as one message (alone on its single subject, as a
// batch of its kind, or as a mixed batch) with a reply subject of the
// client's reply mux; its answer (or the client's timeout) completes it.
// Items of several kinds go as one batch per kind instead once a service
// without the mixed batch endpoint was met; the caller counted one message
// in flight, and send counts the others. k.mu is held. It does not block.
func (k *coalescer) send(items []*citem) {
	if k.noMixed.Load() {
		if runs, mixed := byKind(items); mixed {
			k.inflight += len(runs) - 1
			for _, run := range runs {
				k.send(run)
			}
			return
		}
	}
	f := &flight{k: k, items: items, batch: len(items) > 1}
	subject, data := k.subjects[items[0].kind].single, items[0].data
	if f.batch {
		for _, it := range items[1:] {
			f.mixed = f.mixed || it.kind != items[0].kind
		}
		bodies := make([][]byte, len(items))
		for i, it := range items {
			bodies[i] = it.data
			if f.mixed {
				bodies[i] = codec.AppendMixedItem(make([]byte, 0, len(it.data)+codec.MixedItemOverhead), it.kind, it.data)
			}
		}
		subject, data = k.subjects[items[0].kind].batch, codec.EncodeBatchReply(bodies)
		if f.mixed {
			subject = k.mixed
		}
	}
	f.subject = subject
	m := k.c.mux
	reply, token, err := m.add(f, k.c.timeout)
	if err == nil {
		err = k.c.nc.PublishRequest(subject, reply, data)
	}
	if err != nil && (token == "" || m.take(token) != nil) {
		go f.complete(nil, err)
	}
}

// complete hands the answer of a flight (msg, or err) to its items.
func (f *flight) complete(msg *nats.Msg, err error) {
	k := f.k
	if f.timer != nil {
		f.timer.Stop()
	}
	if err == nil && len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
		err = nats.ErrNoResponders
	}
	k.mu.Lock()
	k.inflight--
	if f.mixed && errors.Is(err, nats.ErrNoResponders) {
		// No service answers mixed batches here (an older one): send the
		// items as a batch per kind, and keep doing so for a while.
		if !k.noMixed.Swap(true) {
			time.AfterFunc(noBatchRecheck, func() { k.noMixed.Store(false) })
		}
		k.inflight++
		k.send(f.items)
		k.mu.Unlock()
		return
	}
	if f.batch && errors.Is(err, nats.ErrNoResponders) {
		// No service answers batches here (or none at all): send the items
		// one by one, and keep doing so for a while.
		if !k.noBatch.Swap(true) {
			time.AfterFunc(noBatchRecheck, func() { k.noBatch.Store(false) })
		}
		k.inflight += len(f.items)
		for _, it := range f.items {
			k.send([]*citem{it})
		}
		k.mu.Unlock()
		return
	}
	k.mu.Unlock()
	if !f.batch || err != nil || (msg.Header != nil && msg.Header.Get(microErrorHeader) != "") {
		// A single answer; or no answer, or the batch refused as a whole
		// (the service's in-flight limit): every item gets that.
		for _, it := range f.items {
			k.finish(it, msg, err)
		}
		return
	}
	// Every answer is decoded strictly by its caller (attempt): the
	// split need not check each one's bytes first.
	answers, err := codec.SplitBatchReply(msg.Data)
	if err != nil || len(answers) != len(f.items) {
		if err == nil {
			err = fmt.Errorf("%d answers to %d items", len(answers), len(f.items))
		}
		err = &UnavailableError{Subject: f.subject, Code: events.CodeInternal, Message: fmt.Sprintf("undecodable batch reply: %v", err), Err: err}
		for _, it := range f.items {
			k.finish(it, nil, err)
		}
		return
	}
	// Their callers are likely to call again at once (an admit's settle):
	// let those calls gather rather than go out one by one.
	k.followers.answered(len(f.items), k.linger)
	for i, it := range f.items {
		k.finish(it, &nats.Msg{Subject: msg.Subject, Data: answers[i]}, nil)
	}
}

// replyMux routes the replies of a client's coalesced messages: one
// subscription on a wildcard inbox, one token per message in flight.
type replyMux struct {
	nc      *nats.Conn
	once    sync.Once
	err     error
	prefix  string
	mu      sync.Mutex
	next    uint64
	waiting map[string]*flight
}

// add registers f and returns its reply subject and token (subscribing on
// first use). If no reply comes within timeout, f completes with a timeout
// error.
func (m *replyMux) add(f *flight, timeout time.Duration) (reply, token string, err error) {
	m.once.Do(func() {
		m.prefix = m.nc.NewInbox() + "."
		m.waiting = map[string]*flight{}
		_, m.err = m.nc.Subscribe(m.prefix+"*", m.deliver)
	})
	if m.err != nil {
		return "", "", m.err
	}
	m.mu.Lock()
	m.next++
	token = strconv.FormatUint(m.next, 36)
	m.waiting[token] = f
	// Set under m.mu: complete reads it after take, which locks m.mu.
	f.timer = time.AfterFunc(timeout, func() {
		if m.take(token) != nil {
			// attempt names the timeout in its error.
			f.complete(nil, errAttemptTimeout)
		}
	})
	m.mu.Unlock()
	return m.prefix + token, token, nil
}

// take removes and returns the flight of token, nil if it is gone.
func (m *replyMux) take(token string) *flight {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.waiting[token]
	delete(m.waiting, token)
	return f
}

func (m *replyMux) deliver(msg *nats.Msg) {
	if f := m.take(strings.TrimPrefix(msg.Subject, m.prefix)); f != nil {
		f.complete(msg, nil)
	}
}

// finish hands it its answer, or gives the answer to onAbandoned if its
// caller is gone.
func (k *coalescer) finish(it *citem, msg *nats.Msg, err error) {
	k.mu.Lock()
	it.answer, it.err, it.finished = msg, err, true
	abandoned := it.abandoned
	k.mu.Unlock()
	close(it.done)
	if abandoned && err == nil && it.kind == streams.EndpointAdmit && k.onAbandoned != nil {
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
