package feed

import (
	"errors"
	"fmt"
	"sort"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/signing"
	"github.com/spendgate/spendgate/streams"
)

// chain decides, as a replica's book does, which revisions of the ledger
// stream are folded and which are skipped, so that the relay relays
// exactly the revisions the replicas fold. A revision is skipped if its
// key set refuses its signature (signing.KeySet.Verify), if it does not
// decode (events.DecodeLaneRevision, events.DecodeBudgetRevision), or if it
// is chained (lane.v2, budget.v2) and does not follow the last valid
// revision of its key (events.CheckChain, classified by
// signing.ChainReason as a replay or a chain break). A skipped revision
// leaves the key's chain where it was; a folded one, chained or not,
// becomes the key's last valid revision.
//
// Which revision of a key is its last valid one depends on every revision
// of the key before it, so the state is built by folding the stream in
// order, once per relay, and kept in memory while the relay runs: from
// the newest checkpoint of the state at or before the feed's tail (see
// checkpoint.go), or from the stream's first revision if there is none.
// When the relay starts again after an error (a lost race, a lost
// consumer) it reads the ledger again from the feed's tail, which may be
// behind what the chain has decided: it then only looks up the decision
// (kept) instead of deciding twice, and folds only what follows (see
// Relay.runOnce). This is the simplest design that decides exactly as
// the replicas do. Reading the previous revision of a key on demand does
// not: whether that one was valid depends in turn on the one before it,
// back to the key's first revision. The state is a sequence and a hash
// per lane and budget key, bounded by the live keys, which is what a
// checkpoint holds: a starting relay decides only the revisions after it,
// with a signature check each, as a replica that loads a snapshot does.
type chain struct {
	// last is the last valid revision of each lane and budget key.
	last map[string]link
	// at is the stream sequence up to which every revision is decided.
	at uint64
	// read reads the ledger stream's message at seq: its key and the
	// hash of its payload; found is false if the stream no longer holds
	// it (a trim dropped it; see check).
	read func(seq uint64) (key, hash string, found bool, err error)
	// from is the sequence of the checkpoint the chain was loaded from
	// (0: folded from the stream's first revision); see checkHead.
	from uint64
	// kept lists, in stream order, the folded revisions with events from
	// the revision of the feed's last event on (see keep and prune): the
	// ones a relay that starts again from the feed's tail, behind at,
	// relays again. They are at most MaxInFlight+1: each has an event
	// in the feed's tail or in the relay's window of appends.
	kept []uint64
}

// link is a valid revision: its stream sequence and events.HashPayload of
// its payload, what the next chained revision of its key names.
type link struct {
	seq  uint64
	hash string
}

func newChain(read func(seq uint64) (key, hash string, found bool, err error)) *chain {
	return &chain{last: map[string]link{}, read: read}
}

// check decides the revision at seq (after at) of key with headers hdr and
// payload data, against the keys trust (nil: signatures not checked),
// without changing the state. It returns the reason it is skipped ("" if
// it is folded) and the decode or chain error behind that reason (why),
// or the error of reading the stream (err: nothing is decided).
//
// One case differs from a replica's book, which on a trimmed stream starts
// from a snapshot: a revision that names a revision after the last one the
// chain folded of its key (a gap), where the named revision is gone from
// the stream. The ledger stream denies deletes and keeps every revision,
// so only a trim (projector.Trim) removes revisions, and a trim keeps each
// lane and budget key's last valid revision at its snapshot and every
// revision after it. So a relay that starts on a trimmed stream, or that
// stopped behind a trim and reads on, meets each key's kept revision
// first, and the key's chain starts there. A replay written after the trim
// comes after that revision and names one before it: it is still skipped.
func (c *chain) check(trust *signing.KeySet, key string, seq uint64, hdr nats.Header, data []byte) (reason signing.Reason, why, err error) {
	if reason := trust.Verify(key, seq, hdr, data); reason != "" {
		return reason, nil, nil
	}
	var ch events.Chain
	var chained bool
	switch {
	case streams.IsLaneKey(key):
		rev, err := events.DecodeLaneRevision(data)
		if err != nil {
			return signing.ReasonMalformed, err, nil
		}
		ch, chained = rev.Chain, rev.Chained()
	case streams.IsBudgetKey(key):
		rev, err := events.DecodeBudgetRevision(data)
		if err != nil {
			return signing.ReasonMalformed, err, nil
		}
		ch, chained = rev.Chain, rev.Chained()
	default:
		return "", nil, nil // not a family the relay reads (Split refuses it)
	}
	if !chained {
		return "", nil, nil
	}
	last := c.last[key]
	why = events.CheckChain(key, seq, ch, last.seq, last.hash)
	if why == nil {
		return "", nil, nil
	}
	if err := c.checkHead(key, last, ch); err != nil {
		return "", nil, err
	}
	if ch.Prev > last.seq && ch.Prev < seq {
		_, _, found, err := c.read(ch.Prev)
		if err != nil {
			return "", nil, err
		}
		if !found {
			return "", nil, nil // trimmed: the chain starts here
		}
	}
	reason, _ = signing.ChainReason(why)
	return reason, why, nil
}

// errCheckpointWrong: the ledger stream contradicts the checkpoint the
// chain was loaded from.
var errCheckpointWrong = errors.New("feed: the ledger stream contradicts the checkpoint")

// checkHead checks, before a revision of key that does not follow last
// (ch is what it names) is refused, that the checkpoint the chain was
// loaded from told the truth about key: a checkpoint is checked when it
// is loaded, but budget keys are not read back then (there may be many),
// and a checkpoint may name an older revision of a key than the last
// valid one, or leave a key out. Either would make the relay refuse every
// later revision of the key, and lose its events. So when a revision is
// to be refused against a head the checkpoint gave (at or before from),
// the stream's message there must be under key with that hash (unless a
// trim dropped it); and the revision it names, if the checkpoint covers
// it and it is not that head, must not be a revision of key (the
// replicas' chain names only valid revisions, which the checkpoint would
// hold). Otherwise it returns errCheckpointWrong, and the relay folds the
// whole ledger instead. It reads the stream only for a revision about to
// be refused (a replay, a break), never for one that follows.
func (c *chain) checkHead(key string, last link, ch events.Chain) error {
	if c.from == 0 {
		return nil
	}
	if last.seq > 0 && last.seq <= c.from {
		k, h, found, err := c.read(last.seq)
		if err != nil {
			return err
		}
		if found && (k != key || h != last.hash) {
			return fmt.Errorf("%w %d: it names revision %d of %s, which the stream does not hold with that hash", errCheckpointWrong, c.from, last.seq, key)
		}
	}
	if ch.Prev > last.seq && ch.Prev <= c.from {
		k, _, found, err := c.read(ch.Prev)
		if err != nil {
			return err
		}
		if found && k == key {
			return fmt.Errorf("%w %d: it names revision %d as the last valid one of %s, but a later revision of %s names %d", errCheckpointWrong, c.from, last.seq, key, key, ch.Prev)
		}
	}
	return nil
}

// fold makes the revision at seq of key with payload data the key's last
// valid revision.
func (c *chain) fold(key string, seq uint64, data []byte) {
	c.last[key] = link{seq: seq, hash: events.HashPayload(data)}
	c.at = seq
}

// skip records that the revision at seq is decided and skipped.
func (c *chain) skip(seq uint64) { c.at = seq }

// keep records that the folded revision at seq has events the relay is
// appending.
func (c *chain) keep(seq uint64) { c.kept = append(c.kept, seq) }

// isKept reports whether the revision at seq (at or before at, at or after
// the last prune) was folded with events.
func (c *chain) isKept(seq uint64) bool {
	i := sort.Search(len(c.kept), func(i int) bool { return c.kept[i] >= seq })
	return i < len(c.kept) && c.kept[i] == seq
}

// prune forgets the kept revisions before seq, the revision of the feed's
// last event: the relay never reads them again.
func (c *chain) prune(seq uint64) {
	i := sort.Search(len(c.kept), func(i int) bool { return c.kept[i] >= seq })
	c.kept = append(c.kept[:0], c.kept[i:]...)
}
