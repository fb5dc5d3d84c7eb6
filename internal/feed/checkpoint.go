package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// DefaultCheckpointEvery is how many events a relay appends between two
// checkpoints of where the feed stands (and it writes one when it stops).
const DefaultCheckpointEvery = 10000

// WithCheckpointEvery sets how many appended events a relay writes a
// checkpoint after (0: only when it stops).
func WithCheckpointEvery(n int) Option {
	return func(r *Relay) error {
		if n < 0 {
			return fmt.Errorf("feed: checkpoint interval must not be negative, got %d", n)
		}
		r.ckEvery = uint64(n)
		return nil
	}
}

// A checkpoint says where the feed stood: the position of its last event
// and that event's feed sequence, signed by the relay that appended it
// (signing.DomainFeedCheckpoint over the object's name and body). A
// starting relay needs it only when every message of the feed aged out
// (or none at its end is signed by a trusted key): then the feed's last
// sequence and the checkpoint's tell how many events past the checkpoint
// are in the feed. It is one object, streams.FeedCheckpointName, in the
// ledger's snapshot bucket; an unsigned or untrusted one is ignored.
type checkpoint struct {
	Seq     uint64 `json:"seq"`
	Index   int    `json:"index"`
	FeedSeq uint64 `json:"feed_seq"`
	Signer  string `json:"signer,omitempty"`
	Sig     string `json:"sig,omitempty"`
}

// Position is the checkpoint's event position.
func (c checkpoint) Position() Position { return Position{Seq: c.Seq, Index: c.Index} }

func (c checkpoint) body() []byte {
	b, _ := json.Marshal(checkpoint{Seq: c.Seq, Index: c.Index, FeedSeq: c.FeedSeq})
	return b
}

// writeCheckpoint writes where t says the feed stands, signed if this
// relay signs.
func (r *Relay) writeCheckpoint(ctx context.Context, t tail) {
	if t.lastSeq == 0 {
		return // no message of the feed that a trusted key signed
	}
	// The message of t.last, which a trusted key signed; never the
	// feed's last sequence, which anyone who may publish can take.
	ck := checkpoint{Seq: t.last.Seq, Index: t.last.Index, FeedSeq: t.lastSeq}
	if s := r.signer(); s != nil {
		h := nats.Header{}
		s.SignMsg(h, signing.DomainFeedCheckpoint, streams.FeedCheckpointName, ck.body())
		ck.Signer, ck.Sig = h.Get(streams.HeaderSigKey), h.Get(streams.HeaderSig)
	}
	data, err := json.Marshal(ck)
	if err != nil {
		return
	}
	store, err := r.js.ObjectStore(ctx, r.l.SnapshotBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		store, err = streams.EnsureSnapshots(ctx, r.js, r.l)
	}
	if err == nil {
		// Nothing goes into a bucket whose stream captures other
		// subjects (streams.ErrSnapshotSubjects).
		err = streams.CheckSnapshotBucket(ctx, r.js, r.l)
	}
	if err == nil {
		_, err = store.PutBytes(ctx, streams.FeedCheckpointName, data)
	}
	if errors.Is(err, streams.ErrSnapshotSubjects) {
		r.log.Error("feed relay: checkpoint not written", "err", err)
		return
	}
	if err != nil {
		r.log.Warn("feed relay: checkpoint not written", "err", err)
		return
	}
	r.ckWritten.Store(t.lastSeq)
}

// loadCheckpoint reads the newest checkpoint a trusted key signed.
func (r *Relay) loadCheckpoint(ctx context.Context) (checkpoint, bool) {
	store, err := r.js.ObjectStore(ctx, r.l.SnapshotBucket())
	if err != nil {
		return checkpoint{}, false
	}
	data, err := store.GetBytes(ctx, streams.FeedCheckpointName)
	if err != nil {
		return checkpoint{}, false
	}
	var ck checkpoint
	if err := json.Unmarshal(data, &ck); err != nil {
		return checkpoint{}, false
	}
	h := nats.Header{}
	h.Set(streams.HeaderSigKey, ck.Signer)
	h.Set(streams.HeaderSig, ck.Sig)
	signer, ok := signing.VerifyMsg(h, signing.DomainFeedCheckpoint, streams.FeedCheckpointName, ck.body())
	ks := r.keys()
	if ks != nil && (!ok || !ks.Trusts(signer, ck.Seq)) {
		r.forged.Add(1)
		r.log.Error("feed relay: a checkpoint no trusted key signed; ignored", "signer", signer)
		return checkpoint{}, false
	}
	r.ckLoaded.Store(ck.FeedSeq)
	return ck, true
}

// CheckpointStats is what a relay did with checkpoints: the feed sequence
// of the last it wrote and of the last it loaded (0: none).
type CheckpointStats struct {
	Written, Loaded uint64
}

// CheckpointStats returns what this relay did with checkpoints.
func (r *Relay) CheckpointStats() CheckpointStats {
	return CheckpointStats{Written: r.ckWritten.Load(), Loaded: r.ckLoaded.Load()}
}
