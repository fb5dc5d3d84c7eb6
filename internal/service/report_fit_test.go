package service_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// fitPayload is the test server's max payload: above a snapshot's object
// chunk (128 KiB), small enough that a report of about a thousand scopes
// does not fit in one message.
const fitPayload = 160 << 10

// TestReport_FoldsToFitOneMessage: a report of more groups than one
// message holds (a thousand user and team scopes from defaults, on a
// server whose max payload is 160 KiB) is answered, within the payload,
// with the groups of the least spend summed into the Other group of
// their unit ("folded" says how many): every named group is the replay's,
// the biggest spender among them, and the totals over all groups are the
// replay's to the digit.
//
// How it can fail: without the fold, the reply exceeds the max payload,
// the replica can only log that it could not send it, and the call waits
// out its timeout (what a review saw with 40,000 denied junk admits and
// the default 1 MiB).
func TestReport_FoldsToFitOneMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reports: true, maxPayload: fitPayload})
	h.putBudget("user:*", "lifetime", "1000", "USD")
	h.putBudget("team:*", "lifetime", "1000", "USD")
	h.putBudget("org:big", "month", "1000", "USD")
	const n = 2 * report.MaxReportValues
	for i := range n {
		scope := fmt.Sprintf("user:bulk-%d", i)
		if i%2 == 1 {
			scope = fmt.Sprintf("team:bulk-%d", i)
		}
		var a events.AdmitReply
		require.Nil(t, h.call(streams.EndpointAdmit, events.AdmitRequest{RequestID: fmt.Sprintf("fit-%d", i), Scopes: []string{scope}, Amount: "0.5", TTL: "1m"}, &a))
		require.True(t, a.Admitted)
		require.Nil(t, h.call(streams.EndpointSettle, events.SettleRequest{ReservationID: a.ReservationID, Actual: fmt.Sprintf("0.%02d", i%97)}, nil))
	}
	big, e := h.admit(events.AdmitRequest{RequestID: "fit-big", Scopes: []string{"org:big"}, Amount: "9", TTL: "1m"})
	require.Nil(t, e)
	_, e = h.settle(big.ReservationID, "8.5")
	require.Nil(t, e)

	var got events.ReportReply
	start := time.Now()
	require.Nil(t, h.call(streams.EndpointReport, events.ReportRequest{By: "scope", Shadow: true}, &got))
	require.Less(t, time.Since(start), 30*time.Second, "answered, not waited out")
	body, err := json.Marshal(got)
	require.NoError(t, err)
	require.LessOrEqual(t, len(body), fitPayload)
	require.Positive(t, got.Folded, "a thousand groups do not fit in 160 KiB")

	want, err := report.NewReader(h.env.JS, h.env.Layout, projector.New(h.env.JS, h.env.Layout)).Report(ctxT(t), report.Filter{}, report.ByScope)
	require.NoError(t, err)
	require.Equal(t, want.Position, got.Position)
	wantOf := map[string]report.SpendGroup{}
	total, wantTotal := events.Zero, events.Zero
	var wantRes, gotRes int64
	for _, w := range want.Groups {
		wantOf[w.Value] = w
		wantTotal = wantTotal.Add(w.Spend)
		wantRes += w.Reservations
	}
	named, other := 0, 0
	for _, g := range got.Groups {
		spend, err := events.ParseMoney(g.Spend)
		require.NoError(t, err)
		total = total.Add(spend)
		gotRes += g.Reservations
		if g.Other {
			require.Empty(t, g.Value, "the one Other group of the unit")
			other++
			continue
		}
		named++
		w, ok := wantOf[g.Value]
		require.True(t, ok, g.Value)
		require.Equal(t, w.Spend.String(), g.Spend, g.Value)
		require.Equal(t, w.Reservations, g.Reservations, g.Value)
	}
	require.Equal(t, 1, other)
	require.Equal(t, len(want.Groups), named+got.Folded, "every group named or folded")
	require.Equal(t, wantTotal.String(), total.String(), "the totals still add up")
	require.Equal(t, wantRes, gotRes)
	require.Equal(t, "8.5", wantOf["org:big"].Spend.String())
	require.Equal(t, "org:big", got.Groups[0].Value, "the biggest spender stays named, first")
}

// TestService_ReplyTooLargeIsRefusedAtOnce: a reply past the connection's
// max payload (every price of 1,100 models, on a server whose max payload
// is 160 KiB) is answered at once with reply_too_large, not left unsent
// for the caller to wait out its timeout. How it can fail: the replica
// logged "reply failed" and the call timed out, as before.
func TestService_ReplyTooLargeIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{maxPayload: fitPayload})
	for i := range 1100 {
		h.putPrice(events.PricingPutRequest{Model: fmt.Sprintf("model-with-a-long-name-%04d", i), Input: "2.5", Output: "10", CachedInput: "1.25"})
	}
	start := time.Now()
	var out events.PricingListReply
	e := h.call(streams.EndpointPricingList, events.PricingListRequest{}, &out)
	require.NotNil(t, e)
	require.Equal(t, events.CodeReplyTooLarge, e.Code, e.Message)
	require.Contains(t, e.Message, "ask for less")
	require.Less(t, time.Since(start), 10*time.Second, "refused at once")
}
