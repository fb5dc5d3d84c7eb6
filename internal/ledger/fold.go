package ledger

import (
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/streams"
)

// fold passes m through the gate and folds what passes into the book: the
// one path of every message this replica reads (the follower, a catch-up,
// its own definition writes). A message of a key already folded at or past
// it returns nothing (folded reports false). A rejection is logged and
// counted once, here, and recorded in the heads (the key's next write
// lands after it). What is folded before the follower reaches it is kept
// for the follower to hand to the readers (see feed).
func (l *Ledger) fold(m *gate.Message, follower bool) (passed *gate.Revision, rej *gate.Rejection, folded bool) {
	if key, ok := l.layout.KeyOf(m.Subject); ok && m.Seq <= l.revOf(key) {
		return nil, nil, false
	}
	// The signature and the decode, the costly part, run outside the
	// book's lock; the chain is checked under it.
	rev, rej := l.gate.Inspect(m)
	l.mu.Lock()
	ok := false
	if rej == nil {
		ok, rej = l.gate.Admit(l.bk.heads, rev)
	}
	recorded := false
	if rej != nil {
		recorded = l.gate.Skip(l.bk.heads, rej)
		l.skipped.add(m.Seq)
	}
	if ok {
		passed = rev
		l.bk.apply(rev)
		if rev.Kind == gate.KindTenantLimits {
			l.publishTenantLimits()
		}
	}
	if !follower && (recorded || ok) {
		l.ahead.put(m.Seq, passed, l.isOwn(m))
	}
	l.mu.Unlock()
	if recorded {
		l.reject(rej)
	}
	return passed, rej, recorded || ok
}

// isOwn reports whether this replica wrote m.
func (l *Ledger) isOwn(m *gate.Message) bool {
	return m.Header != nil && m.Header.Get(streams.HeaderWriter) == l.id
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
		ok, rej := l.gate.Admit(l.bk.heads, r)
		if rej != nil {
			l.gate.Skip(l.bk.heads, rej)
			l.skipped.add(seqs[i])
			return &events.Error{Code: events.CodeLedgerUnavailable, Message: "own write does not follow the folded revision (a fork)", Err: rej}
		}
		if ok {
			l.bk.apply(r)
			l.ahead.put(seqs[i], r, true)
		}
	}
	return nil
}
