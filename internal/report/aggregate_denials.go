package report

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// Denials in spend reports. A denied admit writes nothing to the ledger;
// each replica records it (events.AdmitDenied) on the denial stream
// (streams.DenialStreamName). A report counts those records per group, in
// the same hour buckets as the reservations (by the denial's time):
//
//   - by scope, a denial counts once in every scope the admit named (as a
//     reservation admitted in several scopes counts once in each), not only
//     in the blocking budget's: the question a report answers is "how many
//     admits of this scope were refused", whichever budget refused them;
//   - by a metadata key, under the admit's value of that key ("" when the
//     admit did not set it);
//   - in the unit the admit was in.
//
// The records are operational data, not the book of record: a replica that
// crashes with records not yet published loses them (a denial is counted
// at most once per replica that denied it, exactly when nothing crashed),
// the stream keeps them for its max age only, and the audit never reads
// them. A record the fold cannot decode is skipped (counted in neither the
// aggregate nor the replay).
//
// Each replica signs its records (signing.SignDenial, over subject,
// Nats-Msg-Id and body) with its signing key. Where the ledger's revisions are checked
// against trusted keys, a record counts only if one of those keys signed
// it (a retired key's records still count; a distrusted key's do not):
// unsigned records (the replica login can write them, and replicas before
// records were signed wrote them), records signed by another key and
// records moved to another subject are skipped, counted by reason
// (denialCheck.Skipped) and logged once per reason. So is a replay: a
// signed record published again counts once, since the stream drops a
// copy under the same id within its duplicate window, a copy under
// another id does not verify, and a copy stored later than
// streams.DenialRecordDelay after the record's time is skipped.

// denialKind is the selection a denial record is counted under.
type denialKind struct {
	tenant, unit string
	scopes       []events.Scope
	metadata     map[string]string
}

// denialOf decodes a denial record; ok is false for one that does not
// decode.
func denialOf(data []byte) (events.AdmitDenied, denialKind, bool) {
	d, err := events.DecodeAdmitDenied(data)
	if err != nil {
		return d, denialKind{}, false
	}
	k := denialKind{tenant: d.Tenant, unit: d.Unit, metadata: d.Metadata}
	for _, s := range d.StoredScopes() {
		if !slices.Contains(k.scopes, s) {
			k.scopes = append(k.scopes, s)
		}
	}
	return d, k, true
}

// selectsDenial reports whether f selects a denial at at of kind k (as it
// selects a reservation opened at at in k's scopes).
func (f Filter) selectsDenial(at time.Time, k denialKind) bool {
	if !f.From.IsZero() && at.Before(f.From) {
		return false
	}
	if !f.denialsUntil.IsZero() && at.After(f.denialsUntil) {
		return false
	}
	if !f.To.IsZero() && !at.Before(f.To) {
		return false
	}
	if f.OneTenant && k.tenant != f.Tenant {
		return false
	}
	if len(f.Scopes) == 0 {
		return true
	}
	for _, s := range k.scopes {
		if slices.Contains(f.Scopes, s) {
			return true
		}
	}
	return false
}

// denialAggregate counts denial records per (hour bucket, tenant,
// dimension, value, unit), with the Aggregate's limits on keys and values.
// Not safe for concurrent use.
type denialAggregate struct {
	pos     uint64
	buckets map[int64]map[groupKey]int64
	// newest is the newest record's stream sequence per bucket: a bucket
	// whose newest record the stream no longer holds (its max age) is
	// dropped.
	newest map[int64]uint64
	sorted []int64
	slots  slots
	// shadow counts the check and shadow records among them (shadow.go).
	shadow *shadowAggregate
	// recent keeps the newest denial records, every replica's (the
	// dashboard's recent denials): the fold reads the stream from its
	// start when the replica starts, so they outlive a restart.
	recent DenialRing
}

func newDenialAggregate() *denialAggregate {
	a := &denialAggregate{buckets: map[int64]map[groupKey]int64{}, newest: map[int64]uint64{},
		slots: slots{}}
	a.shadow = newShadowAggregate(a)
	return a
}

// apply counts the record at seq (skipped if at or below the position, or
// if it does not decode).
func (a *denialAggregate) apply(seq uint64, data []byte) {
	if seq <= a.pos {
		return
	}
	a.pos = seq
	d, k, ok := denialOf(data)
	if !ok {
		a.shadow.apply(seq, data)
		return
	}
	a.recent.Add(d)
	b := bucketOf(d.At)
	cells := a.buckets[b]
	if cells == nil {
		cells = map[groupKey]int64{}
		a.buckets[b] = cells
		i, _ := slices.BinarySearch(a.sorted, b)
		a.sorted = slices.Insert(a.sorted, i, b)
	}
	a.newest[b] = max(a.newest[b], seq)
	for _, g := range a.groupsOf(k) {
		cells[g]++
	}
}

// groupsOf returns the groups a record of kind k counts in: the total,
// each of its scopes, each metadata value it sets (a key's "" group is
// the total less the values), tracking keys and values within the
// limits (the check records share them: shadow.go).
func (a *denialAggregate) groupsOf(k denialKind) []groupKey {
	out := []groupKey{{Tenant: k.tenant, Dim: dimTotal, Unit: k.unit}}
	for _, s := range k.scopes {
		v, other := a.slots.value(k.tenant, dimScope, string(s))
		out = append(out, groupKey{Tenant: k.tenant, Dim: dimScope, Value: v, Other: other, Unit: k.unit})
	}
	for key, v := range k.metadata {
		if v == "" {
			continue
		}
		dim, ok := a.slots.key(k.tenant, key)
		if !ok {
			continue
		}
		val, other := a.slots.value(k.tenant, dim, v)
		out = append(out, groupKey{Tenant: k.tenant, Dim: dim, Value: val, Other: other, Unit: k.unit})
	}
	return out
}

// prune drops the buckets whose records all left the stream (first is
// the stream's first sequence).
func (a *denialAggregate) prune(first uint64) {
	a.shadow.prune(first)
	for len(a.sorted) > 0 && a.newest[a.sorted[0]] < first {
		b := a.sorted[0]
		delete(a.buckets, b)
		delete(a.newest, b)
		a.sorted = a.sorted[1:]
	}
}

// counts sums the denials f selects (by its whole-hour bounds and tenant)
// grouped by, keyed by groupKey without Tenant and Dim. A metadata key
// the denials did not track while others were dropped gives
// ErrKeyNotTracked.
func (a *denialAggregate) counts(by GroupBy, f Filter) (map[groupKey]int64, error) {
	dim, err := a.dimOf(by, f)
	if err != nil {
		return nil, err
	}
	out := map[groupKey]int64{}
	totals := map[string]int64{}
	for _, b := range bucketRange(a.sorted, f) {
		for k, n := range a.buckets[b] {
			if f.OneTenant && k.Tenant != f.Tenant {
				continue
			}
			switch k.Dim {
			case dim:
				out[groupKey{Value: k.Value, Other: k.Other, Unit: k.Unit}] += n
			case dimTotal:
				totals[k.Unit] += n
			}
		}
	}
	if !by.scope {
		// A metadata key's "" group: the denials without the key.
		for k, n := range out {
			totals[k.Unit] -= n
		}
		for unit, n := range totals {
			if n > 0 {
				out[groupKey{Unit: unit}] += n
			}
		}
	}
	return out, nil
}

// dimOf is the dimension by groups on; a metadata key the records of f's
// tenants did not track while others were dropped gives ErrKeyNotTracked.
func (a *denialAggregate) dimOf(by GroupBy, f Filter) (string, error) {
	if by.scope {
		return dimScope, nil
	}
	if a.slots.untracked(by.key, f) {
		return "", ErrKeyNotTracked
	}
	return MetadataColumnPrefix + by.key, nil
}

// bucketRange is the part of sorted (hour buckets, ascending) within f's
// whole-hour bounds.
func bucketRange(sorted []int64, f Filter) []int64 {
	lo, hi := 0, len(sorted)
	if !f.From.IsZero() {
		lo, _ = slices.BinarySearch(sorted, f.From.Unix())
	}
	if !f.To.IsZero() {
		hi, _ = slices.BinarySearch(sorted, f.To.Unix())
	}
	return sorted[lo:max(lo, hi)]
}

// addDenials adds counts to rep's groups (a group with denials and no
// reservation is added) and sorts them again.
func addDenials(rep *AggregateReport, counts map[groupKey]int64) {
	if len(counts) == 0 {
		return
	}
	for k, n := range counts {
		if rep.fold != nil && !k.Other {
			k.Value, k.Other = rep.fold(k.Value)
		}
		found := false
		for i := range rep.Groups {
			g := &rep.Groups[i]
			if g.Value == k.Value && g.Unit == k.Unit && rep.IsOther(i) == k.Other {
				g.Denials += n
				found = true
				break
			}
		}
		if !found {
			rep.Groups = append(rep.Groups, SpendGroup{Value: k.Value, Unit: k.Unit, Denials: n})
			if k.Other {
				rep.Other = append(rep.Other, len(rep.Groups)-1)
			}
		}
	}
	sortGroups(rep)
}

// denialCheck decides which denial records a reader counts: with keys
// (nil, or returning nil: every record), only those a key of theirs that
// is not distrusted signed. It counts what it skips by reason, each record
// once, and logs the first of each reason. Safe for concurrent use.
type denialCheck struct {
	keys    func() *signing.KeySet
	log     *slog.Logger
	mu      sync.Mutex
	skipped map[signing.Reason]uint64
	counted uint64 // the last sequence counted in skipped
}

func newDenialCheck(keys func() *signing.KeySet, log *slog.Logger) *denialCheck {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &denialCheck{keys: keys, log: log, skipped: map[signing.Reason]uint64{}}
}

// passes reports whether the record at seq (subject, headers, body),
// which the stream stored at stored, counts, counting and logging it if
// not. A record stored more than delay after its own time is a replay
// (signing.ReasonReplay): a copy of a signed record published again
// under its own Nats-Msg-Id, which the stream's duplicate window no
// longer drops (streams.DenialRecordDelay), or an old one signed before
// records signed their id.
func (c *denialCheck) passes(seq uint64, subject string, h nats.Header, data []byte, stored time.Time, delay time.Duration) bool {
	if c == nil || c.keys == nil {
		return true
	}
	ks := c.keys()
	if ks == nil {
		return true
	}
	signer, valid, _ := signing.VerifyDenial(h, subject, data)
	var reason signing.Reason
	switch _, known := ks.Lookup(signer); {
	case signer == "":
		reason = signing.ReasonUnsigned
	case !valid:
		reason = signing.ReasonBadSignature
	case ks.IsDistrusted(signer):
		reason = signing.ReasonDistrustedKey
	case !known:
		reason = signing.ReasonUntrustedKey
	case stale(data, stored, delay):
		reason = signing.ReasonReplay
	default:
		return true
	}
	c.mu.Lock()
	first := false
	if seq > c.counted { // a record read again (a report's second pass) counts once
		c.counted = seq
		c.skipped[reason]++
		first = c.skipped[reason] == 1
	}
	c.mu.Unlock()
	if first {
		c.log.Warn("report: denial record skipped, not counted (later ones for the same reason are counted, not logged)",
			"seq", seq, "subject", subject, "reason", string(reason), "signer", signer)
	}
	return false
}

// stale reports whether the record data was stored more than delay
// after its own time. A record whose time does not decode is not stale:
// it is skipped as one that does not decode.
func stale(data []byte, stored time.Time, delay time.Duration) bool {
	var rec struct {
		At time.Time `json:"at"`
	}
	if err := json.Unmarshal(data, &rec); err != nil || rec.At.IsZero() || stored.IsZero() {
		return false
	}
	return stored.Sub(rec.At) > delay
}

// Skipped returns how many records the check skipped, by reason.
func (c *denialCheck) Skipped() map[signing.Reason]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.skipped)
}

// readDenials hands the records of layout's denial stream to fn in stream
// order, a record check does not pass with nil data (which decodes as no
// record): until == 0 follows the stream until ctx ends (then it returns
// nil); otherwise it ends after sequence until or when nothing is
// pending. A missing stream is no record: errNoDenialStream.
func readDenials(ctx context.Context, js jetstream.JetStream, layout streams.Layout, check *denialCheck, from, until uint64, fn func(seq uint64, data []byte)) error {
	s, err := js.Stream(ctx, layout.DenialStreamName())
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return errNoDenialStream
		}
		return fmt.Errorf("report: stream %s: %w", layout.DenialStreamName(), err)
	}
	delay := streams.DenialRecordDelay(s.CachedInfo().Config.Duplicates)
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if from > 1 {
		cfg = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from}
	}
	cons, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("report: ordered consumer on %s: %w", layout.DenialStreamName(), err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("report: ordered consumer on %s: %w", layout.DenialStreamName(), err)
	}
	defer it.Stop()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if until == 0 && ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("report: read %s: %w", layout.DenialStreamName(), err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("report: message metadata: %w", err)
		}
		seq := meta.Sequence.Stream
		if until != 0 && seq > until {
			return nil
		}
		data := msg.Data()
		if !check.passes(seq, msg.Subject(), msg.Headers(), data, meta.Timestamp, delay) {
			data = nil // a follower's position still moves past it
		}
		fn(seq, data)
		if until != 0 && (seq >= until || meta.NumPending == 0) {
			return nil
		}
	}
}

// errNoDenialStream: the denial stream does not exist (no replica
// recorded a denial yet, or every replica runs without denial records).
var errNoDenialStream = errors.New("report: no denial stream")

// denialState returns the denial stream's first and last sequence; both 0
// when it does not exist.
func denialState(ctx context.Context, js jetstream.JetStream, layout streams.Layout) (first, last uint64, err error) {
	s, err := js.Stream(ctx, layout.DenialStreamName())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("report: stream %s: %w", layout.DenialStreamName(), err)
	}
	st := s.CachedInfo().State
	return st.FirstSeq, st.LastSeq, nil
}

// denialTracker keeps a denialAggregate up to date from the denial stream
// for an Aggregator. It is not in the report snapshots: a start folds the
// denial stream from its first record (it holds the stream's max age of
// denials at most). Safe for concurrent use.
type denialTracker struct {
	js     jetstream.JetStream
	layout streams.Layout
	check  *denialCheck

	mu    sync.Mutex
	agg   *denialAggregate
	moved chan struct{}
	err   error
}

func newDenialTracker(js jetstream.JetStream, layout streams.Layout) *denialTracker {
	return &denialTracker{js: js, layout: layout, agg: newDenialAggregate(), moved: make(chan struct{})}
}

// denialRetry is how long the tracker waits before looking again for a
// denial stream that is missing or whose read failed.
const denialRetry = time.Second

// run folds the denial stream until ctx ends, waiting for it while it does
// not exist and reading on after a failed read.
func (t *denialTracker) run(ctx context.Context) {
	for ctx.Err() == nil {
		t.mu.Lock()
		from := t.agg.pos + 1
		t.mu.Unlock()
		err := readDenials(ctx, t.js, t.layout, t.check, from, 0, func(seq uint64, data []byte) {
			t.mu.Lock()
			t.agg.apply(seq, data)
			close(t.moved)
			t.moved = make(chan struct{})
			t.mu.Unlock()
		})
		if err == nil || ctx.Err() != nil {
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(denialRetry):
		}
	}
	t.mu.Lock()
	t.err = ErrAggregatorStopped
	close(t.moved)
	t.moved = make(chan struct{})
	t.mu.Unlock()
}

// counts waits until the tracker has folded the denial stream up to its
// last record as of the call, drops the buckets the stream no longer
// holds, and returns the counts of by and f (see denialAggregate.counts)
// and its shadow groups (shadowAggregate.groups).
func (t *denialTracker) counts(ctx context.Context, by GroupBy, f Filter) (map[groupKey]int64, []ShadowGroup, error) {
	first, last, err := denialState(ctx, t.js, t.layout)
	if err != nil {
		return nil, nil, err
	}
	for {
		t.mu.Lock()
		pos, moved, terr := t.agg.pos, t.moved, t.err
		if pos >= last {
			if first > 0 {
				t.agg.prune(first)
			}
			c, err := t.agg.counts(by, f)
			var sh []ShadowGroup
			if err == nil {
				sh, err = t.agg.shadow.groups(by, f)
			}
			t.mu.Unlock()
			return c, sh, err
		}
		t.mu.Unlock()
		if terr != nil {
			return nil, nil, terr
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// replayDenials reads the denial stream up to its last record as of the
// call and hands every record f selects to add with its kind.
func (p *Reader) replayDenials(ctx context.Context, f Filter, add func(k denialKind)) error {
	_, last, err := denialState(ctx, p.js, p.layout)
	if err != nil || last == 0 {
		return err
	}
	err = readDenials(ctx, p.js, p.layout, p.check, 1, last, func(_ uint64, data []byte) {
		d, k, ok := denialOf(data)
		if ok && f.selectsDenial(d.At, k) {
			add(k)
		}
	})
	if errors.Is(err, errNoDenialStream) {
		return nil
	}
	return err
}
