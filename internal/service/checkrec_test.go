package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestCheckRecords: check and shadow answers are recorded on the denial
// stream as admit.checked.v1 (admitted or not, with mode, reason, scopes,
// amount, unit and the request's metadata), apart from denial records
// (admit.denied.v1, still one per denied real admit). Two checks of one
// request id are two records. Before, a check or shadow answer was only a
// metric: the stream held the real denial alone.
func TestCheckRecords(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.putBudget("team:tight", "day", "10", "USD")
	meta := map[string]string{"feature": "summarize"}
	for _, req := range []events.AdmitRequest{
		{RequestID: "shadow-1", Scopes: []string{"team:tight"}, Amount: "12", Mode: events.ModeShadow, Metadata: meta},
		{RequestID: "shadow-1", Scopes: []string{"team:tight"}, Amount: "12", Mode: events.ModeShadow, Metadata: meta},
		{RequestID: "check-1", Scopes: []string{"team:tight"}, Amount: "3", Mode: events.ModeCheck},
		{RequestID: "real-1", Scopes: []string{"team:tight"}, Amount: "11"},
	} {
		_, e := h.admit(req)
		require.Nil(t, e)
		h.clock.now.Store(h.clock.now.Load().Add(time.Second))
	}
	rec := h.replicas[0].Denials
	require.Eventually(t, func() bool { return rec.RecordedChecks() == 3 && rec.Recorded() == 1 }, 30*time.Second, 10*time.Millisecond,
		"records published: %d checks, %d denials", rec.RecordedChecks(), rec.Recorded())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := h.env.JS.OrderedConsumer(ctx, h.env.Layout.DenialStreamName(), jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	var checks []events.AdmitChecked
	var denials []events.AdmitDenied
	for len(checks)+len(denials) < 4 {
		msg, err := c.Next(jetstream.FetchMaxWait(10 * time.Second))
		require.NoError(t, err)
		if d, err := events.DecodeAdmitDenied(msg.Data()); err == nil {
			denials = append(denials, d)
			continue
		}
		x, err := events.DecodeAdmitChecked(msg.Data())
		require.NoError(t, err, string(msg.Data()))
		require.Equal(t, h.env.Layout.DenialSubject("", "team:tight"), msg.Subject())
		checks = append(checks, x)
	}
	require.Len(t, denials, 1)
	require.Equal(t, "real-1", denials[0].RequestID)
	require.Len(t, checks, 3)
	for i, want := range []struct {
		id, mode, amount string
		admitted         bool
		reason           events.Code
	}{{"shadow-1", events.ModeShadow, "12", false, events.ReasonLimitReached}, {"shadow-1", events.ModeShadow, "12", false, events.ReasonLimitReached},
		{"check-1", events.ModeCheck, "3", true, ""}} {
		x := checks[i]
		require.Equal(t, want.id, x.RequestID)
		require.Equal(t, want.mode, x.Mode)
		require.Equal(t, want.admitted, x.Admitted)
		require.Equal(t, want.reason, x.Reason())
		require.Equal(t, want.amount, x.Amount)
		require.Equal(t, "USD", x.Unit)
		require.Equal(t, []string{"team:tight"}, x.Scopes)
		require.NotEmpty(t, x.Replica)
	}
	require.Equal(t, meta, checks[0].Metadata)
	require.Equal(t, events.Scope("team:tight"), checks[0].Denial.Scope.Local())
}
