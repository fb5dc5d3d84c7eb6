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
// body was changed under its signature, a genuine one published again
// under another id, one published again after the duplicate window) are
// skipped and counted by reason; a copy under the record's own id is
// dropped by the stream. How we know it can fail: a replay that checks no
// signature counts all ten records stored, as every reader did before
// records were signed; before records signed their id and their age was
// checked, the two replays counted (5 of 10).
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
	signer, ok, legacy := signing.VerifyDenial(nats.Header(genuine.Header), genuine.Subject, genuine.Data)
	require.True(t, ok, "the replica signed its record")
	require.False(t, legacy, "over its Nats-Msg-Id too")
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

	// Replays of a genuine record. Under its own id, within the stream's
	// duplicate window: the stream drops it.
	again := nats.NewMsg(genuine.Subject)
	again.Data, again.Header = genuine.Data, nats.Header(genuine.Header)
	ack, err := s.env.JS.PublishMsg(ctx, again)
	require.NoError(t, err)
	require.True(t, ack.Duplicate, "the stream drops a copy under the record's own id")
	// Under another id (or none): the signature covers the id.
	forge(genuine.Subject, genuine.Data, nats.Header(genuine.Header))
	// After the window, under its own id: older than a record may be
	// when stored. As a replayed record looks, signed by the trusted key.
	signed := func(requestID string, at time.Time, legacy bool) {
		t.Helper()
		d := d
		d.RequestID, d.At = requestID, at
		data, err := events.EncodeAdmitDenied(d)
		require.NoError(t, err)
		m := nats.NewMsg(genuine.Subject)
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, streams.DenialMsgID("r", "", requestID))
		if legacy {
			s.k.SignMsg(m.Header, signing.DomainDenial, m.Subject, data)
		} else {
			s.k.SignDenial(m.Header, m.Subject, data)
		}
		ack, err := s.env.JS.PublishMsg(ctx, m)
		require.NoError(t, err)
		require.False(t, ack.Duplicate)
	}
	signed("d-old", time.Now().Add(-streams.DenialMaxDelay-time.Minute), false)
	// A record signed as replicas did before they signed its id, on time:
	// it counts (a replica of the version before, in a rolling upgrade).
	signed("d-legacy", time.Now(), true)

	total := func(rep *report.SpendReport) (n int64) {
		for _, g := range rep.Groups {
			n += g.Denials
		}
		return n
	}
	want := map[signing.Reason]uint64{signing.ReasonUnsigned: 1, signing.ReasonUntrustedKey: 1, signing.ReasonBadSignature: 3,
		signing.ReasonReplay: 1}

	var live *report.AggregateReport
	require.Eventually(t, func() bool {
		live, err = r.Reports.Report(ctx, report.ByMetadata("model"), report.Filter{})
		require.NoError(t, err)
		return total(&live.SpendReport) == 4
	}, 10*time.Second, 10*time.Millisecond, "the live report counts the genuine records and the legacy one, once each")
	require.Equal(t, want, r.Reports.DenialsSkipped())
	// The dashboard's recent denials are the records the report counts:
	// the genuine three and the legacy one, none of the forged.
	var recent []string
	for _, x := range r.RecentDenials() {
		recent = append(recent, x.RequestID)
	}
	require.ElementsMatch(t, []string{"d-1", "d-2", "d-3", "d-legacy"}, recent)

	rd := report.NewReader(s.env.JS, s.env.Layout, projector.New(s.env.JS, s.env.Layout, projector.Verifying(s.trust)))
	replay, err := rd.Report(ctx, report.Filter{}, report.ByMetadata("model"))
	require.NoError(t, err)
	require.Equal(t, int64(4), total(replay), "the replay counts the genuine records once")
	require.Equal(t, want, rd.DenialsSkipped())

	unchecked, err := report.NewReader(s.env.JS, s.env.Layout, projector.New(s.env.JS, s.env.Layout, projector.Unverified())).Report(ctx, report.Filter{}, report.ByMetadata("model"))
	require.NoError(t, err)
	require.Equal(t, int64(10), total(unchecked), "a reader that checks no signature counts every record stored")
}
