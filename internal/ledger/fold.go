package ledger

import (
	"errors"
	"fmt"
	"slices"

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
		if reason := l.gate.Refuses(signer, seqs[i]); reason != "" {
			// The ledger stopped trusting this replica's key (a trust
			// revision this replica folded after deciding the write):
			// every replica skips the write, so must this one, and its
			// Txs are not done.
			rej := &gate.Rejection{Seq: seqs[i], Key: revs[i].key, Reason: reason, Signer: signer}
			l.gate.Skip(l.bk.heads, rej)
			l.skipped.add(seqs[i])
			return &events.Error{Code: events.CodeLedgerUnavailable, Message: "this replica's write landed after the ledger stopped trusting its signing key; every replica skips it", Err: errors.Join(ErrNotTrusted, rej)}
		}
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

// ErrOwnWriteRefused: the ledger's trust stopped admitting this replica's
// signing key at a sequence before writes this replica had already folded
// from memory (decided and acknowledged before it folded that trust
// revision). Every other replica skips those writes; this one cannot
// unfold them, so its follower stops: the replica must not answer from a
// book the others do not hold.
var ErrOwnWriteRefused = errors.New("ledger: writes this replica folded were made after the ledger stopped trusting its signing key")

// ownWritesRefused checks, after the trust revision at seq was folded,
// the writes this replica folded from memory past seq: any the new trust
// state refuses is ErrOwnWriteRefused, with the sequences, each logged.
func (l *Ledger) ownWritesRefused(seq uint64) error {
	var refused []uint64
	var signer string
	l.ahead.each(func(s uint64, e aheadEntry) {
		if s > seq && e.own && e.passed != nil && l.gate.Refuses(e.passed.Signer, s) != "" {
			refused, signer = append(refused, s), e.passed.Signer
		}
	})
	if len(refused) == 0 {
		return nil
	}
	slices.Sort(refused)
	for _, s := range refused {
		l.opts.log.Error("ledger: this replica wrote and acknowledged a revision after the ledger stopped trusting its signing key; every other replica skips it, and the transactions it acknowledged are not held",
			"seq", s, "trust_seq", seq, "signer", signer)
	}
	return fmt.Errorf("%w: trust revision %d, own writes at %v: stopping (restart it with a trusted key; it folds the ledger as the other replicas do)", ErrOwnWriteRefused, seq, refused)
}
