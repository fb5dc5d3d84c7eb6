package report

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// Reader answers reports and exports from a replay of the ledger: the
// verified read of a projector (projector.Projector.Read, through the one
// gate, the archive's first if the projector reads one) and the denial
// stream of the same JetStream.
type Reader struct {
	p      *projector.Projector
	js     jetstream.JetStream
	layout streams.Layout
	check  *denialCheck
}

// NewReader returns a Reader that replays the ledger through p (built with
// the same js and layout, and the trust it should verify with) and reads
// denials from js, counting only the records a key p's replay trusts
// signed (projector.Projector.Keys; every record when it checks no
// signature).
func NewReader(js jetstream.JetStream, layout streams.Layout, p *projector.Projector) *Reader {
	return &Reader{p: p, js: js, layout: layout, check: newDenialCheck(p.Keys, nil)}
}

// DenialsSkipped returns how many denial records the Reader's reads left
// out, by reason: unsigned, or not signed by a key its replay trusts.
func (p *Reader) DenialsSkipped() map[signing.Reason]uint64 { return p.check.Skipped() }

// message is one revision as the folds of this package take it: from a
// replay (the gate decoded it: rev is set) or from a replica's follower
// (Aggregate.Apply: the payload only).
type message struct {
	seq  uint64
	key  string
	data []byte
	at   time.Time
	rev  *gate.Revision
}

func fromProjector(m projector.Message) message {
	return message{seq: m.Seq, key: m.Key, data: m.Data, at: m.At, rev: m.Rev}
}
