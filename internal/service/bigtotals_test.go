package service_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestSettle_TotalPastRecordedDigitsRefused: a settle whose actual would
// take a balance's spent past the 18 integer digits the ledger stores is
// refused (invalid_amount, nothing written), instead of being acknowledged
// and then skipped as malformed by every replay and every restarting
// replica. The harness's check (replay == live) runs at the end.
//
// How we know it can fail: without the check in settle, the second settle
// is answered "settled", the balance's spent becomes
// 1000000000000000000.5, and the replay skips the revision: the error
// is nil and the check reports the divergence.
func TestSettle_TotalPastRecordedDigitsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	const max = "999999999999999999" // 18 integer digits, the most a limit or an actual may have
	h.putBudget("org:big", "month", max, "USD")
	open := func(rid string) string {
		r, e := h.admit(events.AdmitRequest{RequestID: rid, Scopes: []string{"org:big"}, Amount: "0.5"})
		require.Nil(t, e)
		require.True(t, r.Admitted)
		return r.ReservationID
	}
	a, b := open("big-a"), open("big-b")
	_, e := h.settle(a, max)
	require.Nil(t, e)
	require.Equal(t, max, h.budget("org:big", "month").Spent)

	seq, msgs := h.streamState()
	_, e = h.settle(b, "1.5")
	require.NotNil(t, e, "a settle past the recordable total must be refused")
	require.Equal(t, events.CodeInvalidAmount, e.Code)
	require.Contains(t, e.Message, "org:big")
	require.Equal(t, b, e.ReservationID)
	require.Equal(t, events.StatusOpen, e.Status)
	seq2, msgs2 := h.streamState()
	require.Equal(t, seq, seq2, "nothing written")
	require.Equal(t, msgs, msgs2)
	v := h.budget("org:big", "month")
	require.Equal(t, max, v.Spent)
	require.Equal(t, "0.5", v.Reserved)

	// What fits is still recorded in full: 0 brings spent to nothing new,
	// and the reservation can be closed.
	r, e := h.settle(b, "0")
	require.Nil(t, e)
	require.Equal(t, events.StatusSettled, r.Status)
}
