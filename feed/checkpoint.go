package feed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Checkpoints of the relay's chain.
//
// A relay decides each ledger revision against the last valid revision of
// its key (see chain), which depends on every earlier revision of the key.
// Without a checkpoint a starting relay must read the whole ledger stream
// to learn that, so its start grows with the history. A checkpoint is the
// chain's state at one ledger sequence S: for each lane and budget key,
// its last valid revision's sequence and payload hash (what the next
// chained revision names). A relay that starts loads the newest valid
// checkpoint at or before the revision of the feed's last event and
// decides only the revisions after S, exactly as if it had folded the
// ledger up to S. The keys are the lanes and the budgets, what is live,
// not the history: a checkpoint is bounded by them, and so is a start
// (loading it, then at most the checkpoint interval of revisions, or as
// many as there are keys if more, decided after it).
//
// Where: an object "feedchain-<S, 20 digits>" (streams.FeedChainName) in
// the ledger's snapshot bucket (streams.Layout.SnapshotBucket), beside the
// ledger's snapshots and the report's, which ignore it. An object and not
// a KV value because it grows with the budgets past a message's size; that
// bucket because the replica that runs the relay (serve --feed) already
// writes it: no new bucket, stream or permission (roles). Names carry S,
// so relays writing at once never replace a checkpoint with another
// state; each relay keeps the newest CheckpointsKept. Not beside the feed
// (a message in the feed stream): consumers read every feed subject, and
// the feed's messages age out, a checkpoint with them. Not the ledger's
// own snapshots, though they hold each key's last valid revision too:
// they carry the whole book (open reservations, the idempotency window)
// for what is here one entry per key, their format is package ledger's,
// and they are written every 100,000 revisions, a start ten times longer.
//
// Cadence: while it decides revisions, a relay writes a checkpoint once
// its chain is the interval (WithCheckpointEvery, by default
// DefaultCheckpointEvery) of revisions, by sequence, past the newest
// checkpoint it wrote or found, or as many as the chain has keys if more:
// writing costs the keys, so this bounds it to about one key per revision
// decided, and bounds what a start decides after the checkpoint the same
// way. Only the sequence counts, not time: a quiet ledger has little to
// decide after an old checkpoint.
//
// Who can write it, and what a forged one could do: the writers of the
// snapshot bucket, that is the replica role (and any identity outside
// the roles with JetStream rights over the bucket). A checkpoint that names an older revision as a
// key's last valid one would make the relay accept a replay of the
// revision after it, and one that names a wrong hash would make it skip
// the key's next legitimate revision. An identity that can write the
// bucket can do worse already: it can write the ledger's snapshots, which
// replicas load (they would fold the same replay), and publish to the
// feed itself, which the relay fills with the same credentials. A
// checkpoint adds no power to those credentials, and it is not signed
// (neither are the ledger's snapshots). What is checked is that it is
// well formed (loadCheckpoint): its schema and fields, exactly; that it
// is of this ledger stream, covers the sequence its name says, names each
// key at most once, in order, with a sequence at or before what it covers
// and a SHA-256 hash; and that the revision it names for each lane (a
// bounded number of reads) is in the stream under that lane's key with
// that hash, unless a trim dropped it. A checkpoint that fails is logged
// and counted (CheckpointStats.Skipped) and an older one is tried; with
// none left the relay folds the whole ledger, as before checkpoints.
// After it is loaded, the stream checks it again wherever it matters:
// before the relay refuses a revision against a key's head from the
// checkpoint, it reads that head (and the revision refused names) back
// from the stream (chain.checkHead), and if the stream contradicts the
// checkpoint (a wrong hash, an older head, a key left out) the relay
// drops it and folds the whole ledger. So a wrong checkpoint cannot make
// the relay lose a legitimate revision; what it can still do is let a
// replay of the revision after an older head through, which takes the
// credentials that can write the feed anyway.
//
// Trimmed streams keep working: a checkpoint's revision that a trim
// dropped is only compared by sequence and hash, and a key's next kept
// revision that names a dropped one starts its chain (chain.check).

// DefaultCheckpointEvery is how many ledger revisions (by sequence) a
// relay decides between two checkpoints of its chain (WithCheckpointEvery).
const DefaultCheckpointEvery = 10_000

// CheckpointsKept is how many checkpoints a relay keeps after writing one.
const CheckpointsKept = 3

// MaxCheckpointSize caps a checkpoint a relay reads: one key takes about
// 150 bytes, so this is room for some 400,000 lanes and budgets.
const MaxCheckpointSize = 64 << 20

// checkpointTimeout bounds each read or write of the bucket: a relay whose
// permissions do not cover it must not wait long to fold the whole ledger.
const checkpointTimeout = 10 * time.Second

// checkpointSchema is the "schema" of a checkpoint's body.
const checkpointSchema = "feed.chain.v1"

// checkpointBody is a checkpoint's JSON body.
type checkpointBody struct {
	Schema string `json:"schema"`
	// Stream is the ledger stream it was folded from.
	Stream string `json:"stream"`
	// Seq is the ledger sequence it covers: every revision up to and
	// including Seq is decided, none after.
	Seq uint64 `json:"seq"`
	// Keys are the lane and budget keys' last valid revisions, sorted by
	// key.
	Keys []checkpointKey `json:"keys"`
}

type checkpointKey struct {
	Key  string `json:"key"`
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
}

// CheckpointStats says what a relay did with checkpoints of its chain.
type CheckpointStats struct {
	// Loaded is the ledger sequence of the checkpoint the relay started
	// from (0: it folded the ledger from its first revision).
	Loaded uint64
	// Skipped counts checkpoints refused at start (unreadable, malformed,
	// of another stream).
	Skipped int64
	// Written is the sequence of the newest checkpoint this relay wrote.
	Written uint64
}

// WithCheckpointEvery makes the relay write a checkpoint of its chain
// every n ledger revisions (default DefaultCheckpointEvery; see the
// checkpoint doc in checkpoint.go). 0 turns checkpoints off: none is
// written or read, and a relay folds the whole ledger when it starts.
func WithCheckpointEvery(n int) Option {
	return func(r *Relay) error {
		if n < 0 {
			return fmt.Errorf("feed: checkpoint interval must not be negative, got %d", n)
		}
		r.ckEvery = uint64(n)
		return nil
	}
}

// CheckpointStats returns what this relay did with checkpoints.
func (r *Relay) CheckpointStats() CheckpointStats {
	return CheckpointStats{Loaded: r.ckLoaded.Load(), Skipped: r.ckSkipped.Load(), Written: r.ckWritten.Load()}
}

// encodeCheckpoint is c's checkpoint body.
func (r *Relay) encodeCheckpoint(c *chain) ([]byte, error) {
	body := checkpointBody{Schema: checkpointSchema, Stream: r.l.StreamName(), Seq: c.at, Keys: make([]checkpointKey, 0, len(c.last))}
	for k, v := range c.last {
		body.Keys = append(body.Keys, checkpointKey{Key: k, Seq: v.seq, Hash: v.hash})
	}
	sort.Slice(body.Keys, func(i, j int) bool { return body.Keys[i].Key < body.Keys[j].Key })
	return json.Marshal(body)
}

// errBadCheckpoint wraps every reason a checkpoint is refused.
var errBadCheckpoint = errors.New("feed: checkpoint refused")

// decodeCheckpoint reads the checkpoint named for seq and checks its form
// (not its anchors, see checkAnchors).
func (r *Relay) decodeCheckpoint(seq uint64, data []byte) (map[string]link, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", errBadCheckpoint, fmt.Sprintf(format, args...))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var body checkpointBody
	if err := dec.Decode(&body); err != nil {
		return nil, bad("%v", err)
	}
	if dec.More() {
		return nil, bad("data after the body")
	}
	switch {
	case body.Schema != checkpointSchema:
		return nil, bad("schema %q, want %q", body.Schema, checkpointSchema)
	case body.Stream != r.l.StreamName():
		return nil, bad("stream %q, want %q", body.Stream, r.l.StreamName())
	case body.Seq != seq || seq == 0:
		return nil, bad("covers %d, its name says %d", body.Seq, seq)
	}
	last := make(map[string]link, len(body.Keys))
	for i, k := range body.Keys {
		if i > 0 && k.Key <= body.Keys[i-1].Key {
			return nil, bad("keys not sorted or repeated at %q", k.Key)
		}
		if !r.validKey(k.Key) {
			return nil, bad("%q is not a lane or budget key of this layout", k.Key)
		}
		if k.Seq == 0 || k.Seq > body.Seq {
			return nil, bad("%s at %d, outside 1..%d", k.Key, k.Seq, body.Seq)
		}
		if !isHash(k.Hash) {
			return nil, bad("%s: hash %q is not a SHA-256 hex digest", k.Key, k.Hash)
		}
		last[k.Key] = link{seq: k.Seq, hash: k.Hash}
	}
	return last, nil
}

// validKey reports whether key is a lane key of the layout ("lane.<n>",
// n below its lanes) or a budget key made of subject tokens.
func (r *Relay) validKey(key string) bool {
	switch {
	case streams.IsLaneKey(key):
		n, err := strconv.Atoi(strings.TrimPrefix(key, "lane."))
		return err == nil && n >= 0 && n < max(1, r.l.Lanes()) && key == "lane."+strconv.Itoa(n)
	case streams.IsBudgetKey(key):
		toks := strings.Split(key, ".")
		if len(toks) < 4 || len(key) > 512 {
			return false
		}
		for _, t := range toks {
			if t == "" || strings.ContainsAny(t, "*> \t\r\n") {
				return false
			}
		}
		return true
	}
	return false
}

// isHash reports whether s is events.HashPayload's form: 64 lower-case
// hex digits.
func isHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// checkAnchors checks that the revision last names for each lane is in
// the ledger stream under that lane's key with that hash, or gone (a trim
// dropped it). This catches a checkpoint of another stream (a bucket left
// behind by a reset ledger). Budget keys are not read back: there may be
// many, and a lane read is one per lane.
func (r *Relay) checkAnchors(ctx context.Context, last map[string]link) error {
	s, err := r.js.Stream(ctx, r.l.StreamName())
	if err != nil {
		return err
	}
	for key, ln := range last {
		if !streams.IsLaneKey(key) {
			continue
		}
		m, err := s.GetMsg(ctx, ln.seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // trimmed
		}
		if err != nil {
			return fmt.Errorf("reading %s at %d: %w", key, ln.seq, err)
		}
		if m.Subject != r.l.Subject(key) || events.HashPayload(m.Data) != ln.hash {
			return fmt.Errorf("%w: the stream's message at %d is not the revision of %s the checkpoint names", errBadCheckpoint, ln.seq, key)
		}
	}
	return nil
}

// checkpointStore opens the snapshot bucket, creating it if create and it
// does not exist.
func (r *Relay) checkpointStore(ctx context.Context, create bool) (jetstream.ObjectStore, error) {
	if r.ckStore != nil {
		return r.ckStore, nil
	}
	store, err := r.js.ObjectStore(ctx, r.l.SnapshotBucket())
	if create && errors.Is(err, jetstream.ErrBucketNotFound) {
		store, err = streams.EnsureSnapshots(ctx, r.js, r.l)
	}
	if err != nil {
		return nil, err
	}
	r.ckStore = store
	return store, nil
}

// checkpointObj is one checkpoint in the bucket.
type checkpointObj struct {
	name string
	seq  uint64
	size uint64
}

// listCheckpoints lists the checkpoints in store, newest first.
func listCheckpoints(ctx context.Context, store jetstream.ObjectStore) ([]checkpointObj, error) {
	objs, err := store.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []checkpointObj
	for _, o := range objs {
		if seq, ok := streams.FeedChainSeq(o.Name); ok && !o.Deleted {
			out = append(out, checkpointObj{name: o.Name, seq: seq, size: o.Size})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq > out[j].seq })
	return out, nil
}

// loadCheckpoint returns the chain of the newest valid checkpoint at or
// before the revision of the feed's last event t.last (nil: none, the
// relay folds from the ledger's first revision). A checkpoint covering
// exactly that revision has decided it; the events after t.last in it are
// still to relay, so the chain keeps it (chain.keep). A checkpoint after
// it is not used: the revisions between are decided but not relayed.
func (r *Relay) loadCheckpoint(ctx context.Context, t tail) *chain {
	if r.ckEvery == 0 || r.ckDistrust || t.last.Seq == 0 {
		// Off, or the stream contradicted one this relay loaded, or
		// an empty feed: every revision is to relay anyway.
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	store, err := r.checkpointStore(lctx, false)
	if err != nil {
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			r.log.Warn("feed relay: checkpoint bucket unreadable; folding the whole ledger", "bucket", r.l.SnapshotBucket(), "err", err)
		}
		return nil
	}
	list, err := listCheckpoints(lctx, store)
	if err != nil {
		r.log.Warn("feed relay: listing checkpoints failed; folding the whole ledger", "err", err)
		return nil
	}
	for _, o := range list {
		if o.seq > t.last.Seq {
			continue
		}
		start := time.Now()
		last, err := r.readCheckpoint(lctx, store, o)
		if err != nil {
			r.ckSkipped.Add(1)
			r.log.Error("feed relay: checkpoint skipped", "checkpoint", o.name, "err", err)
			continue
		}
		c := newChain(nil)
		c.last, c.at, c.from = last, o.seq, o.seq
		if o.seq == t.last.Seq {
			c.keep(o.seq)
		}
		r.ckLoaded.Store(o.seq)
		r.ckAt = o.seq
		r.log.Info("feed relay: started from a checkpoint", "checkpoint", o.name, "keys", len(last), "took", time.Since(start), "tail", t.last.ID())
		return c
	}
	if len(list) > 0 {
		r.log.Warn("feed relay: no usable checkpoint; folding the whole ledger", "checkpoints", len(list), "tail", t.last.ID())
	}
	return nil
}

// readCheckpoint reads and checks the checkpoint o.
func (r *Relay) readCheckpoint(ctx context.Context, store jetstream.ObjectStore, o checkpointObj) (map[string]link, error) {
	if o.size > MaxCheckpointSize {
		return nil, fmt.Errorf("%w: %d bytes, over %d", errBadCheckpoint, o.size, MaxCheckpointSize)
	}
	data, err := store.GetBytes(ctx, o.name) // checks the object's SHA-256 digest
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", o.name, err)
	}
	if len(data) > MaxCheckpointSize {
		return nil, fmt.Errorf("%w: %d bytes, over %d", errBadCheckpoint, len(data), MaxCheckpointSize)
	}
	last, err := r.decodeCheckpoint(o.seq, data)
	if err != nil {
		return nil, err
	}
	if err := r.checkAnchors(ctx, last); err != nil {
		return nil, err
	}
	return last, nil
}

// checkpointDue reports whether the chain is far enough past the newest
// checkpoint to write one: the interval's revisions, or as many as it has
// keys if more.
func (r *Relay) checkpointDue(c *chain) bool {
	return r.ckEvery > 0 && c.at >= r.ckAt+max(r.ckEvery, uint64(len(c.last)))
}

// writeCheckpoint writes c as a checkpoint, unless another relay wrote one
// recent enough, and keeps the newest CheckpointsKept. A failure is
// logged; the relay tries again an interval later. It runs on Run's
// goroutine, between two revisions: the chain is exact at c.at.
func (r *Relay) writeCheckpoint(ctx context.Context, c *chain) {
	wctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	at := c.at
	store, err := r.checkpointStore(wctx, true)
	var list []checkpointObj
	if err == nil {
		list, err = listCheckpoints(wctx, store)
	}
	if err == nil && len(list) > 0 && list[0].seq > r.ckAt {
		// Another relay wrote one meanwhile (or this one, before it
		// started again).
		if r.ckAt = min(list[0].seq, at); !r.checkpointDue(c) {
			return
		}
	}
	var data []byte
	if err == nil {
		data, err = r.encodeCheckpoint(c)
	}
	name := streams.FeedChainName(at)
	if err == nil {
		if _, err = store.PutBytes(wctx, name, data); err != nil {
			err = fmt.Errorf("writing %s: %w", name, err)
		}
	}
	r.ckAt = at
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("feed relay: cannot write a checkpoint", "seq", at, "err", err)
		}
		return
	}
	r.ckWritten.Store(at)
	r.log.Debug("feed relay: wrote a checkpoint", "checkpoint", name, "keys", len(c.last), "bytes", len(data))
	if !slices.ContainsFunc(list, func(o checkpointObj) bool { return o.name == name }) {
		list = append(list, checkpointObj{name: name, seq: at})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].seq > list[j].seq })
	for _, o := range list[min(len(list), CheckpointsKept):] {
		if err := store.Delete(wctx, o.name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			r.log.Warn("feed relay: deleting an old checkpoint", "checkpoint", o.name, "err", err)
		}
	}
}
