package service

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// DefaultDenialBuffer is how many denial records a DenialRecorder holds
// before it drops new ones.
const DefaultDenialBuffer = 4096

// denialPublishTimeout bounds one publish of a denial record, and
// denialDrainTimeout the publishing of what is buffered when Run ends.
const (
	denialPublishTimeout = 5 * time.Second
	denialDrainTimeout   = 5 * time.Second
)

// DenialRecorder publishes the admits a replica denies to the denial
// stream (streams.DenialStreamName), off the request path: Record only
// puts the record in a bounded buffer (and counts a drop when it is full),
// Run publishes from it. Each record's Nats-Msg-Id is
// streams.DenialMsgID of the replica, tenant and request id, so a retry of
// one denied request on one replica within the dedupe window is recorded
// once. A record buffered when the replica crashes is lost: a denial is
// recorded at most once per replica. It records the check and shadow
// answers the same way (RecordCheck: events.AdmitChecked, Nats-Msg-Id
// streams.CheckMsgID), in the same buffer. Safe for concurrent use.
type DenialRecorder struct {
	js      jetstream.JetStream
	layout  streams.Layout
	replica string
	log     *slog.Logger
	ch      chan record

	recorded, checks, dropped, failed, limited atomic.Uint64
	// tenantBytes bounds the bytes of each tenant's records (nil: no
	// bound; LimitTenantBytes); onLimited is told of each record it
	// leaves out.
	tenantBytes *tenantBuckets
	onLimited   func(tenant string)
	// signer returns the key each record is signed with as it is
	// published (nil, or returning nil: unsigned); see SignWith.
	signer func() *signing.Signer
	// maxWait: a record buffered longer is not published (readers would
	// skip it as a replay); see WaitAtMost.
	maxWait time.Duration

	// mu guards queued (records buffered), settled (records whose
	// publish ended, either way) and progress (closed and replaced as
	// each ends): what Flush waits on.
	mu       sync.Mutex
	queued   uint64
	settled  uint64
	progress chan struct{}
}

// NewDenialRecorder returns a recorder for replica (a name unique among
// the running replicas) that buffers up to buffer records (0:
// DefaultDenialBuffer). It does no I/O until Run.
func NewDenialRecorder(js jetstream.JetStream, layout streams.Layout, replica string, buffer int, log *slog.Logger) (*DenialRecorder, error) {
	if replica == "" {
		return nil, errors.New("service: a denial recorder needs a replica name")
	}
	if buffer <= 0 {
		buffer = DefaultDenialBuffer
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &DenialRecorder{js: js, layout: layout, replica: replica, log: log, ch: make(chan record, buffer),
		progress: make(chan struct{}), maxWait: streams.DenialMaxDelay}, nil
}

// WaitAtMost sets how long a record may wait in the buffer and still be
// published: streams.DenialRecordDelay of the denial stream's duplicate
// window, which readers hold records to (the default is
// streams.DenialMaxDelay). Call it before Run.
func (r *DenialRecorder) WaitAtMost(d time.Duration) {
	if d > 0 {
		r.maxWait = d
	}
}

// LimitTenantBytes bounds the records of each tenant to perSecond bytes
// per second, encoded, with a burst of TenantDenialBurst seconds' worth: a
// record past it is not recorded, is counted in Limited, and onLimited
// (if not nil) is called with its tenant. perSecond <= 0 leaves records
// unbounded. own, if not nil, gives the tenants whose own limits set
// DenialBytes theirs. The untenanted deployment's denials are not
// bounded, except those of admits naming a budget it does not have
// (unknown_budget), which share one bound of perSecond (the bucket of
// tenant "", a name no tenant has): any name is
// such a scope, so a caller sending made-up names as fast as it can
// would otherwise fill the buffer every record shares and crowd out the
// denials of real budgets. Call it before Run.
func (r *DenialRecorder) LimitTenantBytes(perSecond int, own *TenantTable, onLimited func(tenant string)) {
	r.tenantBytes = newTenantBuckets(perSecond, perSecond*TenantDenialBurst, time.Now, own.bytesOf())
	r.onLimited = onLimited
}

// SignWith has every record signed as it is published, over its subject,
// Nats-Msg-Id and body (signing.SignDenial), by the key signer returns then (the
// replica's signing key: a rotation applies from the next record); nil
// leaves them unsigned. Readers that check signatures (the report, the
// backtest, their replays) count only records a key the ledger trusts
// signed: the replica login cannot add denials a report would count.
// Call it before Run.
func (r *DenialRecorder) SignWith(signer func() *signing.Signer) { r.signer = signer }

// Replica is the replica name the records carry.
func (r *DenialRecorder) Replica() string { return r.replica }

// record is one buffered record: a denial or a check answer.
type record struct {
	denial *events.AdmitDenied
	check  *events.AdmitChecked
	// data is the denial or check encoded, when counting its tenant's
	// bytes encoded it already (nil: publish encodes it).
	data []byte
	// queued is when it was buffered (this machine's clock, monotonic):
	// one that waits longer than maxWait is not published.
	queued time.Time
}

// Record buffers d for publishing, with its replica set, and reports
// whether it was buffered (false: the buffer was full, or d's tenant is
// past its bytes per second (LimitTenantBytes), and d is dropped and
// counted). It never blocks.
func (r *DenialRecorder) Record(d events.AdmitDenied) bool {
	d.Replica = r.replica
	rec := record{denial: &d}
	bounded := d.Tenant != "" || d.Denial.Reason == events.ReasonUnknownBudget
	if bounded && r.tenantBytes != nil {
		// Counted at its encoded size, before it takes a place in the
		// buffer, which every tenant shares.
		data, err := events.EncodeAdmitDenied(d)
		if err != nil {
			r.failed.Add(1)
			return false
		}
		if !r.tenantBytes.take(d.Tenant, len(data)) {
			r.limited.Add(1)
			if r.onLimited != nil && d.Tenant != "" {
				r.onLimited(d.Tenant)
			}
			return false
		}
		rec.data = data
	}
	return r.buffer(rec)
}

// RecordCheck buffers a check or shadow answer as Record does a denial,
// under the same bound (LimitTenantBytes): a tenant's check answers, and
// the untenanted deployment's denied for a budget it does not have, take
// their bytes from the same bucket as its denials. Without it a tenant
// sending "mode": "check" admits (any scope name, 4 KB of metadata each)
// filled the denial stream, and the buffer every record shares, at the
// rate it may send requests.
func (r *DenialRecorder) RecordCheck(c events.AdmitChecked) bool {
	c.Replica = r.replica
	rec := record{check: &c}
	bounded := c.Tenant != "" || c.Denial != nil && c.Denial.Reason == events.ReasonUnknownBudget
	if bounded && r.tenantBytes != nil {
		data, err := events.EncodeAdmitChecked(c)
		if err != nil {
			r.failed.Add(1)
			return false
		}
		if !r.tenantBytes.take(c.Tenant, len(data)) {
			r.limited.Add(1)
			if r.onLimited != nil && c.Tenant != "" {
				r.onLimited(c.Tenant)
			}
			return false
		}
		rec.data = data
	}
	return r.buffer(rec)
}

func (r *DenialRecorder) buffer(rec record) bool {
	rec.queued = time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case r.ch <- rec:
		r.queued++
		return true
	default:
		r.dropped.Add(1)
		return false
	}
}

// Flush waits until every record buffered before the call has been
// published (or has failed), or ctx ends, and returns ctx's error then.
// The replica's own report calls it, so a report counts the denials this
// replica answered before it.
func (r *DenialRecorder) Flush(ctx context.Context) error {
	r.mu.Lock()
	target := r.queued
	for r.settled < target {
		ch := r.progress
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
		r.mu.Lock()
	}
	r.mu.Unlock()
	return nil
}

// settle notes that one buffered record's publish ended.
func (r *DenialRecorder) settle() {
	r.mu.Lock()
	r.settled++
	close(r.progress)
	r.progress = make(chan struct{})
	r.mu.Unlock()
}

// Recorded, Dropped and Failed count the records published, dropped for
// a full buffer, and whose publish failed. Recorded counts denial records
// only; RecordedChecks the check and shadow records.
func (r *DenialRecorder) Recorded() uint64 { return r.recorded.Load() }

// RecordedChecks counts the check and shadow records published.
func (r *DenialRecorder) RecordedChecks() uint64 { return r.checks.Load() }

// Dropped counts the records dropped because the buffer was full.
func (r *DenialRecorder) Dropped() uint64 { return r.dropped.Load() }

// Failed counts the records whose publish failed.
func (r *DenialRecorder) Failed() uint64 { return r.failed.Load() }

// Limited counts the records left out past their bound of bytes per
// second (LimitTenantBytes): their tenant's, or the untenanted
// deployment's unknown_budget denials'.
func (r *DenialRecorder) Limited() uint64 { return r.limited.Load() }

// Run publishes buffered records until ctx ends, then publishes what is
// still buffered within a few seconds. It returns nil.
func (r *DenialRecorder) Run(ctx context.Context) error {
	for {
		select {
		case rec := <-r.ch:
			r.publish(ctx, rec)
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), denialDrainTimeout)
			defer cancel()
			for {
				select {
				case rec := <-r.ch:
					r.publish(dctx, rec)
				default:
					return nil
				}
			}
		}
	}
}

// recordScope is the scope a record's subject names: the blocking
// budget's, or else the first the admit named.
func recordScope(n *events.Denial, scopes []string) events.Scope {
	var scope events.Scope
	if n != nil {
		scope = n.Scope.Local()
	}
	if scope == "" && len(scopes) > 0 {
		scope = events.Scope(scopes[0])
	}
	return scope
}

// publish publishes rec, retrying a failed publish (the same Nats-Msg-Id,
// so a publish that was stored but not acknowledged is not doubled) until
// denialPublishTimeout.
func (r *DenialRecorder) publish(ctx context.Context, rec record) {
	defer r.settle()
	var (
		data               []byte
		err                error
		requestID, sub, id string
	)
	if d := rec.denial; d != nil {
		data = rec.data // encoded already when its tenant's bytes were counted
		if data == nil {
			data, err = events.EncodeAdmitDenied(*d)
		}
		requestID = d.RequestID
		sub = r.layout.DenialSubject(d.Tenant, recordScope(&d.Denial, d.Scopes))
		id = streams.DenialMsgID(r.replica, d.Tenant, d.RequestID)
	} else {
		c := rec.check
		data = rec.data // encoded already when its tenant's bytes were counted
		if data == nil {
			data, err = events.EncodeAdmitChecked(*c)
		}
		requestID = c.RequestID
		sub = r.layout.DenialSubject(c.Tenant, recordScope(c.Denial, c.Scopes))
		id = streams.CheckMsgID(r.replica, c.Tenant, c.Mode, c.RequestID, c.At)
	}
	if err != nil {
		r.failed.Add(1)
		return
	}
	if waited := time.Since(rec.queued); waited > r.maxWait {
		// Readers would skip it as a replay (stored too long after its
		// time): it waited in the buffer that long, the stream
		// unreachable or far behind.
		r.failed.Add(1)
		r.log.Warn("denial record not published: it waited longer than a reader counts a record", "request_id", requestID, "waited", waited.Round(time.Second))
		return
	}
	msg := nats.NewMsg(sub)
	msg.Data = data
	msg.Header.Set(jetstream.MsgIDHeader, id)
	if r.signer != nil {
		if s := r.signer(); s != nil {
			s.SignDenial(msg.Header, sub, data)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, denialPublishTimeout)
	defer cancel()
	for {
		_, err = r.js.PublishMsg(pctx, msg)
		if err == nil {
			if rec.check != nil {
				r.checks.Add(1)
			} else {
				r.recorded.Add(1)
			}
			return
		}
		select {
		case <-pctx.Done():
			r.failed.Add(1)
			r.log.Warn("denial record not published", "request_id", requestID, "err", err)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// defaultAdmitUnit is the admitter's default unit (an admit that names
// none and no model is in it).
const defaultAdmitUnit = "USD"
