package ledger

import (
	"context"
	"encoding/json"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/streams"
)

// plan is one attempt of a definition write, decided against the book (read
// locked): the key to write, and either build, which makes the revision to
// write from the chain the key's next revision names, or noop (the key
// holds what the write would, as this replica has folded it), or neither
// (nothing to write: done). An error is the final answer.
type plan func(b *book) (key string, build func(events.Chain) any, noop bool, err error)

// define is the one compare-and-set loop of every definition key (budget,
// pricing, default, trust): decide with p against the book, write one
// revision chained to the key's last valid revision with a compare-and-set
// on its last revision, fold it through the gate, and on a lost
// compare-and-set fold what was missed and decide again. A no-op is
// confirmed against the stream's latest revision of the key first (another
// replica may have changed it a moment ago). All attempts share one
// deadline: ctx's, or the submit timeout if ctx has none; ctx's
// cancellation does not abandon a write in flight.
//
// It returns the sequence written (0 with wrote false: nothing to write).
// Errors: p's own; *events.Error with CodeLedgerUnavailable (the follower
// is not running, JetStream could not be reached, or the deadline passed)
// or CodeLedgerBusy; CodeInternal if the gate refuses this replica's own
// write.
func (l *Ledger) define(ctx context.Context, what string, p plan) (seq uint64, wrote bool, err error) {
	if err := l.live(); err != nil {
		return 0, false, err
	}
	ctx, cancel := l.commitContext(ctx)
	defer cancel()
	// lost is a write of the last attempt whose outcome was unknown (its
	// acknowledgement timed out): if the catch-up found it landed, it is
	// this call's write, answered as written with what that attempt
	// decided (deciding again would find the key already holding it, and
	// answer a new budget "existed").
	var lost lostWrite
	for attempt := 0; attempt < l.opts.maxAttempts; attempt++ {
		if err := l.live(); err != nil {
			return 0, false, err
		}
		seq, landed, err := lost.landed(ctx, l)
		if err != nil {
			return 0, false, &events.Error{Code: events.CodeLedgerUnavailable, Message: "outcome of a write of " + what + " unknown and the ledger cannot be read", Err: err}
		}
		if landed {
			return seq, true, nil
		}
		lost = lostWrite{}
		if ctx.Err() != nil {
			return 0, false, &events.Error{Code: events.CodeLedgerUnavailable, Message: "deadline passed writing " + what, Err: ctx.Err()}
		}
		l.mu.RLock()
		key, build, noop, err := p(l.bk)
		// rev names the compare-and-set, valid the chain: they differ
		// after a skipped revision.
		rev := l.bk.rev(key)
		valid, hash := l.bk.valid(key)
		l.mu.RUnlock()
		switch {
		case err != nil:
			return 0, false, err
		case noop:
			latest, err := l.latestRev(ctx, key)
			if err != nil {
				return 0, false, err
			}
			if latest == rev {
				return 0, false, nil
			}
			if err := l.catchUp(ctx, key); err != nil {
				return 0, false, err
			}
			continue
		case build == nil:
			return 0, false, nil
		}
		data, err := json.Marshal(build(events.Chain{Prev: valid, PrevHash: hash}))
		if err != nil {
			return 0, false, &events.Error{Code: events.CodeInternal, Message: "encoding " + what, Err: err}
		}
		if key != streams.TrustKey { // a trust write has its own check (PublishTrust)
			if err := l.writable(); err != nil {
				return 0, false, err
			}
		}
		seq, hdr, err := l.publishOne(ctx, key, rev, data)
		if err == nil {
			if _, rej, _ := l.fold(&gate.Message{Seq: seq, Subject: l.layout.Subject(key), Header: hdr, Data: data}, false); rej != nil {
				return 0, false, &events.Error{Code: events.CodeInternal, Message: "the gate refused this replica's own " + what + " write", Err: rej}
			}
			l.ownFolded()
			return seq, true, nil
		}
		if !streams.IsConflict(err) && !isTimeout(err) {
			return 0, false, &events.Error{Code: events.CodeLedgerUnavailable, Message: "writing " + what, Err: err}
		}
		if isTimeout(err) {
			lost = lostWrite{keys: []string{key}, hashes: []string{events.HashPayload(data)}, revs: []uint64{rev}}
		}
		if err := l.catchUp(ctx, key); err != nil {
			return 0, false, err
		}
	}
	return 0, false, events.Errorf(events.CodeLedgerBusy, "%s: too many concurrent writers", what)
}
