package projector_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// A login that can write to the stream names a real key on a revision it
// did not sign: Signers lists that revision apart (BadSignature) and the
// key's own use keeps the sequences the key signed, so an operator
// retiring the key reads its true last sequence. How we know it can fail:
// counted by the key their headers name alone, as Signers did, the two
// forgeries would be the key's fourth and fifth revisions and the last
// would be its last sequence.
func TestSigners_BadSignatureCountedApart(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	signer, err := signing.NewEphemeral()
	require.NoError(t, err)
	key := env.Layout.LaneKey(acme)
	publish := func(data []byte, sign func(nats.Header)) uint64 {
		msg := nats.NewMsg(env.Layout.Subject(key))
		msg.Data = data
		sign(msg.Header)
		ack, err := env.JS.PublishMsg(ctx, msg)
		require.NoError(t, err)
		return ack.Sequence
	}
	signed := func(data []byte) func(nats.Header) {
		return func(h nats.Header) { signer.Sign(h, key, data) }
	}

	unsigned := publish([]byte("u"), func(nats.Header) {})
	var seqs []uint64
	for _, data := range []string{"a", "b", "c"} {
		seqs = append(seqs, publish([]byte(data), signed([]byte(data))))
	}
	// The key's name with the signature of other bytes, and with no
	// signature at all.
	swapped := publish([]byte("forged"), signed([]byte("a")))
	named := publish([]byte("forged too"), func(h nats.Header) { h.Set(streams.HeaderSigKey, signer.PublicKey()) })

	uses, err := projector.Signers(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.Equal(t, []projector.KeyUse{
		{Key: "", First: unsigned, Last: unsigned, Revisions: 1},
		{Key: signer.PublicKey(), First: seqs[0], Last: seqs[2], Revisions: 3},
		{Key: signer.PublicKey(), BadSignature: true, First: swapped, Last: named, Revisions: 2},
	}, uses)
}

// Signers counts what a key signed under every key a writer writes (the
// trust, a price, a tenant's limits, ...), not lane and budget keys alone,
// and nothing under a key no writer writes. How we know it can fail: it
// read lane and budget keys only, so a key's last sequence stopped at its
// last lane write, and an operator who retired it there skipped its later
// price and tenant limit revisions.
func TestSigners_EveryKeyKind(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	signer, err := signing.NewEphemeral()
	require.NoError(t, err)
	var seqs []uint64
	for _, key := range []string{env.Layout.LaneKey(acme), streams.TrustKey, streams.PricingKey("m1"), streams.TenantLimitsKey("acme"),
		streams.DefaultKey("user", "month"), streams.APIKeyKey("k1"), "not.a.key"} {
		msg := nats.NewMsg(env.Layout.Subject(key))
		msg.Data = []byte("x")
		signer.Sign(msg.Header, key, msg.Data)
		ack, err := env.JS.PublishMsg(ctx, msg)
		require.NoError(t, err)
		seqs = append(seqs, ack.Sequence)
	}
	uses, err := projector.Signers(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.Equal(t, []projector.KeyUse{{Key: signer.PublicKey(), First: seqs[0], Last: seqs[5], Revisions: 6}}, uses)
}
