package projector

import (
	"context"
	"errors"
	"time"

	"github.com/spendgate/spendgate/events"
)

// Revision is a lane or budget revision of the book of record as every
// fold of the projector reads it: after the gate passed it (signature,
// chain, decode). It is what a replay of recorded decisions (package
// internal/backtest) takes, so that it never reads the stream another way.
type Revision struct {
	// Seq is the revision's stream sequence; At the time the stream
	// stored it.
	Seq uint64
	At  time.Time
	// Lane or Budget is the decoded revision (the other is nil). They
	// are shared with the gate: not to be changed.
	Lane   *events.LaneRevision
	Budget *events.BudgetRevision
}

// Revisions hands fn, in stream order, every lane and budget revision of
// the stream from its first message to its last as of the call (those of
// the archive first, with UseArchive) that the gate passes; a revision the
// gate refuses is skipped, as a replica skips it. It returns the position
// it read up to. fn returning an error ends the read with that error. It
// does not change the projector's state.
//
// It returns the stream lookup or consumer error, ctx's error,
// ErrTrimmed, or fn's error.
func (p *Projector) Revisions(ctx context.Context, fn func(Revision) error) (uint64, error) {
	s, last, err := p.stream(ctx)
	if err != nil {
		return 0, err
	}
	if err := p.whole(s, last); err != nil {
		return 0, err
	}
	if last == 0 {
		return 0, nil
	}
	err = p.readVerified(ctx, s, 1, last, p.verifierFrom(1), func(m message) error {
		if m.rev == nil || (m.rev.Lane == nil && m.rev.Budget == nil) {
			return nil
		}
		return fn(Revision{Seq: m.seq, At: m.at, Lane: m.rev.Lane, Budget: m.rev.Budget})
	})
	return last, err
}

// Denials hands fn, in stream order, every denial record (see
// events.AdmitDenied) that f selects by its time, tenant and scopes, from
// the denial stream's first record to its last as of the call. A record
// that does not decode is skipped; without a denial stream there is none.
// Denial records are operational data, unsigned, kept for the stream's
// max age: what a replica denied, not the book of record. fn returning an
// error ends the read with that error.
//
// It returns the stream lookup or consumer error, ctx's error, or fn's
// error.
func (p *Projector) Denials(ctx context.Context, f Filter, fn func(events.AdmitDenied) error) error {
	_, last, err := denialState(ctx, p.js, p.layout)
	if err != nil || last == 0 {
		return err
	}
	var ferr error
	err = readDenials(ctx, p.js, p.layout, 1, last, func(_ uint64, data []byte) {
		if ferr != nil {
			return
		}
		d, k, ok := denialOf(data)
		if ok && f.selectsDenial(d.At, k) {
			ferr = fn(d)
		}
	})
	if errors.Is(err, errNoDenialStream) {
		err = nil
	}
	if err == nil {
		err = ferr
	}
	return err
}
