package service_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// TestReport_DenialRecordsSigned: a replica signs its denial records, and
// the report counts only those a trusted key signed, live and replayed.
// Records written past the replica, as the replica login can write them
// (one unsigned, one signed by a key the ledger does not trust, a genuine
// one's bytes and signature moved to another scope's subject, one whose
// body was changed under its signature), are skipped and counted by
// reason. How we know it can fail: a replay that checks no signature
// counts all seven records, as every reader did before records were
// signed.
func TestReport_DenialRecordsSigned(t *testing.T) {
	t.Parallel()
	s := newSignedEnv(t)
	ctx := ctxT(t)
	r := s.replica(t, false)
	_, err := r.Ledger.PutBudget(ctx, events.BudgetRef{Scope: "org:acme", Period: events.PeriodMonth}, events.MustMoney("1"), "USD", time.Now())
	require.NoError(t, err)
	nc := s.env.Connect(t)
	for _, id := range []string{"d-1", "d-2", "d-3"} {
		data, err := json.Marshal(events.AdmitRequest{RequestID: id, Scopes: []string{"org:acme"}, Amount: "5", TTL: "1m"})
		require.NoError(t, err)
		msg, err := nc.Request(s.env.Layout.Endpoint(streams.EndpointAdmit), data, 10*time.Second)
		require.NoError(t, err)
		var rep events.AdmitReply
		require.NoError(t, json.Unmarshal(msg.Data, &rep), string(msg.Data))
		require.False(t, rep.Admitted, string(msg.Data))
	}
	require.Eventually(t, func() bool { return r.Denials.Recorded() == 3 }, 30*time.Second, 10*time.Millisecond)

	denials := s.env.Layout.DenialStreamName()
	st, err := s.env.JS.Stream(ctx, denials)
	require.NoError(t, err)
	genuine, err := st.GetMsg(ctx, 1)
	require.NoError(t, err)
	signer, ok := signing.VerifyMsg(nats.Header(genuine.Header), signing.DomainDenial, genuine.Subject, genuine.Data)
	require.True(t, ok, "the replica signed its record")
	require.Equal(t, s.k.PublicKey(), signer)

	forge := func(subject string, data []byte, h nats.Header) {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Data = data
		for k, v := range h {
			if k != jetstream.MsgIDHeader { // a new message, not the genuine one's retry
				m.Header[k] = v
			}
		}
		ack, err := s.env.JS.PublishMsg(ctx, m)
		require.NoError(t, err)
		require.False(t, ack.Duplicate)
	}
	forge(genuine.Subject, genuine.Data, nil) // unsigned
	other, err := signing.NewEphemeral()
	require.NoError(t, err)
	h := nats.Header{}
	other.SignMsg(h, signing.DomainDenial, genuine.Subject, genuine.Data)
	forge(genuine.Subject, genuine.Data, h) // signed by a key the ledger does not trust
	moved := s.env.Layout.DenialSubject("", events.Scope("org:other"))
	require.NotEqual(t, genuine.Subject, moved)
	forge(moved, genuine.Data, nats.Header(genuine.Header)) // a genuine signature, another subject
	d, err := events.DecodeAdmitDenied(genuine.Data)
	require.NoError(t, err)
	d.RequestID = "d-forged"
	changed, err := events.EncodeAdmitDenied(d)
	require.NoError(t, err)
	forge(genuine.Subject, changed, nats.Header(genuine.Header)) // the body changed under a genuine signature

	total := func(rep *report.SpendReport) (n int64) {
		for _, g := range rep.Groups {
			n += g.Denials
		}
		return n
	}
	want := map[signing.Reason]uint64{signing.ReasonUnsigned: 1, signing.ReasonUntrustedKey: 1, signing.ReasonBadSignature: 2}

	live, err := r.Reports.Report(ctx, report.ByMetadata("model"), report.Filter{})
	require.NoError(t, err)
	require.Equal(t, int64(3), total(&live.SpendReport), "the live report counts the signed records only")
	require.Equal(t, want, r.Reports.DenialsSkipped())

	rd := report.NewReader(s.env.JS, s.env.Layout, projector.New(s.env.JS, s.env.Layout, projector.Verifying(s.trust)))
	replay, err := rd.Report(ctx, report.Filter{}, report.ByMetadata("model"))
	require.NoError(t, err)
	require.Equal(t, int64(3), total(replay), "the replay counts the signed records only")
	require.Equal(t, want, rd.DenialsSkipped())

	unchecked, err := report.NewReader(s.env.JS, s.env.Layout, projector.New(s.env.JS, s.env.Layout, projector.Unverified())).Report(ctx, report.Filter{}, report.ByMetadata("model"))
	require.NoError(t, err)
	require.Equal(t, int64(7), total(unchecked), "a reader that checks no signature counts every record")
}
