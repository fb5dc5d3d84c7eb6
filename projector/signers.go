package projector

import (
	"context"
	"sort"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// KeyUse is what one signing key signed in the ledger stream: the first and
// last stream sequence and how many revisions. Key "" stands for unsigned
// revisions. BadSignature marks the revisions whose headers name Key but
// whose signature that key did not make (a forgery, or bytes changed
// after signing): they are counted apart, never as the key's.
type KeyUse struct {
	Key          string
	BadSignature bool
	First, Last  uint64
	Revisions    int
}

// Signers reads every revision of the ledger stream and returns, per
// signing key named in its headers, what it signed, sorted by first
// sequence. It answers which key wrote where, e.g. the last sequence of a
// key being retired, whether or not a trust list holds the key: so it
// checks each signature against the key its headers name only, and counts
// a revision whose signature does not verify apart (BadSignature), so that
// a login that can write to the stream cannot move a key's last sequence
// by naming it. Whether a key may sign is Check's question.
//
// With WithArchive it reads the archive first, then the stream after it
// (the revisions of a trimmed stream); other options are ignored. It
// returns the stream lookup or consumer error, ctx's error, an archive
// that fails verification (ErrArchive), or ErrTrimmed for a trimmed
// stream read without its archive (its counts would be short).
func Signers(ctx context.Context, js jetstream.JetStream, layout streams.Layout, opts ...CheckOption) ([]KeyUse, error) {
	o := newCheckOptions(opts, false)
	p := New(js, layout)
	s, last, err := p.stream(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.withArchive(o); err != nil {
		return nil, err
	}
	if err := p.whole(s, last); err != nil || last == 0 {
		return nil, err
	}
	type use struct {
		key string
		bad bool
	}
	uses := map[use]*KeyUse{}
	err = p.read(ctx, s, 1, last, func(m message) error {
		if _, ok := gate.KindOf(layout, m.key); !ok {
			return nil // not a revision: no writer writes there
		}
		k := use{key: m.header.Get(streams.HeaderSigKey)}
		if k.key != "" || m.header.Get(streams.HeaderSig) != "" {
			_, ok := signing.VerifyBy(m.key, m.header, m.data)
			k.bad = !ok
		}
		u := uses[k]
		if u == nil {
			u = &KeyUse{Key: k.key, BadSignature: k.bad, First: m.seq}
			uses[k] = u
		}
		u.Last = m.seq
		u.Revisions++
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]KeyUse, 0, len(uses))
	for _, u := range uses {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].First < out[j].First })
	return out, nil
}
