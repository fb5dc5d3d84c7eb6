package feed

import (
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
// order from its first revision, once per relay, and kept in memory while
// the relay runs. When the relay starts again after an error (a lost race,
// a lost consumer) it reads the ledger again from the feed's tail, which
// may be behind what the chain has decided: it then only looks up the
// decision (kept) instead of deciding twice, and folds only what follows
// (see Relay.runOnce). This is the simplest design that decides exactly as
// the replicas do. Reading the previous revision of a key on demand does
// not: whether that one was valid depends in turn on the one before it,
// back to the key's first revision. Persisting the state with the feed's
// position would mean a hash per lane and budget key, without bound,
// written beside the feed. The cost is that a starting relay reads the
// whole ledger stream once, with a signature check per revision, as a
// replica that loads no snapshot does.
type chain struct {
	// last is the last valid revision of each lane and budget key.
	last map[string]link
	// at is the stream sequence up to which every revision is decided.
	at uint64
	// trimmed: the ledger stream had lost revisions when the fold began
	// (a trim: see projector.Trim). A trim keeps, of every lane and budget
	// key, its last valid revision at the trim's snapshot and what
	// follows, so the first revision of a key the fold meets there names a
	// revision that is gone: the key's chain starts at it.
	trimmed bool
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

func newChain(trimmed bool) *chain {
	return &chain{last: map[string]link{}, trimmed: trimmed}
}

// check decides the revision at seq (after at) of key with headers hdr and
// payload data, against the keys trust (nil: signatures not checked),
// without changing the state. It returns the reason it is skipped ("" if
// it is folded) and the decode or chain error behind that reason.
func (c *chain) check(trust *signing.KeySet, key string, seq uint64, hdr nats.Header, data []byte) (signing.Reason, error) {
	if reason := trust.Verify(key, seq, hdr, data); reason != "" {
		return reason, nil
	}
	var ch events.Chain
	var chained bool
	switch {
	case streams.IsLaneKey(key):
		rev, err := events.DecodeLaneRevision(data)
		if err != nil {
			return signing.ReasonMalformed, err
		}
		ch, chained = rev.Chain, rev.Chained()
	case streams.IsBudgetKey(key):
		rev, err := events.DecodeBudgetRevision(data)
		if err != nil {
			return signing.ReasonMalformed, err
		}
		ch, chained = rev.Chain, rev.Chained()
	default:
		return "", nil // not a family the relay reads (Split refuses it)
	}
	if !chained {
		return "", nil
	}
	last, ok := c.last[key]
	if !ok && c.trimmed {
		return "", nil
	}
	err := events.CheckChain(key, seq, ch, last.seq, last.hash)
	if reason, ok := signing.ChainReason(err); ok {
		return reason, err
	}
	return "", nil
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
