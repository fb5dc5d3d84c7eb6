package report

import (
	"context"
	"errors"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/projector"
)

// What a replay of recorded decisions (package internal/backtest) reads:
// the verified revisions and the denial records, through this Reader.

// Revisions hands fn, in stream order, every revision of the ledger up to
// its last message as of the call that passes the gate (projector.Read).
// It returns the position read up to, and Read's errors.
func (p *Reader) Revisions(ctx context.Context, fn func(projector.Message) error) (uint64, error) {
	return p.p.Read(ctx, 0, fn)
}

// Denials hands fn, in stream order, every denial record (see
// events.AdmitDenied) that f selects by its time, tenant and scopes, up to
// the denial stream's last record as of the call. A record that does not
// decode is skipped; without a denial stream there is none. fn returning
// an error ends the read with that error.
//
// It returns the stream lookup or consumer error, ctx's error, or fn's.
func (p *Reader) Denials(ctx context.Context, f Filter, fn func(events.AdmitDenied) error) error {
	_, last, err := denialState(ctx, p.js, p.layout)
	if err != nil || last == 0 {
		return err
	}
	var ferr error
	err = readDenials(ctx, p.js, p.layout, p.check, 1, last, func(_ uint64, data []byte) {
		if ferr != nil {
			return
		}
		if d, k, ok := denialOf(data); ok && f.selectsDenial(d.At, k) {
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
