package ledger

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/streams"
)

// The hand-read ack gives what jetstream.PublishMsg's encoding/json read
// gives, for success acks (read by hand, without allocating) and for
// everything else (handed to encoding/json). Fails if a conflict (10071)
// were read as a success, or a success as an error.
func TestPubAck(t *testing.T) {
	for _, c := range []struct {
		in       string
		seq      uint64
		err      error // errors.Is
		conflict bool
	}{
		{in: `{"stream":"KV_spendgate","seq":42}`, seq: 42},
		{in: ` {"stream" : "KV_spendgate", "seq" : 7, "duplicate":true, "domain":"hub"} `, seq: 7},
		{in: `{"stream":"KV_spendgate","domain":"","seq":18446744073709551615}`, seq: 18446744073709551615},
		{in: `{"stream":"KV_sp\u0065ndgate","seq":9}`, seq: 9}, // an escape: encoding/json reads it
		{in: `{"stream":"KV_spendgate","seq":9,"extra":{"a":[1]}}`, seq: 9},
		{in: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"KV_spendgate","seq":0}`, conflict: true, err: &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}},
		{in: `{"type":"io.nats.jetstream.api.v1.pub_ack_response","error":{"code":400,"err_code":10164,"description":"wrong last sequence"}}`, conflict: true},
		{in: `{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}`, err: &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamMessageExceedsMaximum}},
		{in: `{"seq":3}`, err: jetstream.ErrInvalidJSAck},
		{in: `{"stream":"","seq":3}`, err: jetstream.ErrInvalidJSAck},
		{in: `{"stream":"KV_spendgate","seq":3`, err: jetstream.ErrInvalidJSAck},
		{in: `+OK`, err: jetstream.ErrInvalidJSAck},
		{in: ``, err: jetstream.ErrInvalidJSAck},
	} {
		seq, err := pubAck([]byte(c.in))
		if c.err == nil && !c.conflict {
			require.NoError(t, err, c.in)
			require.Equal(t, c.seq, seq, c.in)
			continue
		}
		require.Error(t, err, c.in)
		if c.err != nil {
			require.True(t, errors.Is(err, c.err), "%s: %v", c.in, err)
		}
		require.Equal(t, c.conflict, streams.IsConflict(err), "%s: %v", c.in, err)
	}
	ok := []byte(`{"stream":"KV_spendgate","seq":42}`)
	if n := testing.AllocsPerRun(100, func() { _, _ = pubAck(ok) }); n != 0 {
		t.Errorf("a success ack costs %.0f allocations", n)
	}
}

// A batch commit's ack names the last sequence and the count; an error is
// the API error itself.
func TestBatchPubAck(t *testing.T) {
	seq, n, err := batchPubAck([]byte(`{"stream":"KV_spendgate","seq":12,"batch":"b-1","count":3}`))
	require.NoError(t, err)
	require.Equal(t, uint64(12), seq)
	require.Equal(t, 3, n)
	_, n, err = batchPubAck([]byte(`{"stream":"KV_spendgate","seq":12}`))
	require.NoError(t, err)
	require.Zero(t, n, "no count: the caller's check fails the batch")
	_, _, err = batchPubAck([]byte(`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"}}`))
	require.True(t, streams.IsConflict(err), "%v", err)
	var api *jetstream.APIError
	require.True(t, errors.As(err, &api))
	_, _, err = batchPubAck([]byte(`nope`))
	require.Error(t, err)
}
