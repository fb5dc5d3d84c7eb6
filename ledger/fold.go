package ledger

import (
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
)

// fold passes m through the gate and folds what passes into the book: the
// one path of every message this replica reads (the follower, a catch-up,
// its own definition writes). A message of a key already folded at or past
// it returns nothing. A rejection is logged and counted once, here, and
// recorded in the heads (the key's next write lands after it).
func (l *Ledger) fold(m *gate.Message) ([]*gate.Revision, *gate.Rejection) {
	if key, ok := l.layout.KeyOf(m.Subject); ok && m.Seq <= l.revOf(key) {
		return nil, nil
	}
	// The signature and the decode, the costly part, run outside the
	// book's lock; the chain is checked under it.
	rev, rej := l.gate.Inspect(m)
	l.mu.Lock()
	var passed []*gate.Revision
	if rej == nil {
		passed, rej = l.gate.Admit(l.bk.heads, rev)
	}
	recorded := false
	if rej != nil {
		recorded = l.gate.Skip(l.bk.heads, rej)
	}
	for _, r := range passed {
		l.bk.apply(r)
	}
	l.mu.Unlock()
	if recorded {
		l.reject(rej)
	}
	return passed, rej
}

// foldOwn folds the lane revisions this replica has just written (revs, at
// seqs, their payloads hashing to hashes) from memory: each passes the
// gate's chain check as any revision does. A refusal means the write
// landed but does not follow what this replica folded (a second writer
// without compare-and-set forked the lane): the caller fails closed.
func (l *Ledger) foldOwn(revs []keyedRevision, seqs []uint64, hashes []string) error {
	signer := l.signerKey()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range revs {
		r := &gate.Revision{Seq: seqs[i], Key: revs[i].key, Kind: gate.KindLane, Hash: hashes[i], Signer: signer, Lane: &revs[i].value}
		passed, rej := l.gate.Admit(l.bk.heads, r)
		if rej != nil {
			l.gate.Skip(l.bk.heads, rej)
			return &events.Error{Code: events.CodeLedgerUnavailable, Message: "own write does not follow the folded revision (a fork)", Err: rej}
		}
		for _, p := range passed {
			l.bk.apply(p)
		}
	}
	return nil
}
