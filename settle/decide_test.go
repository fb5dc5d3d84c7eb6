package settle_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/settle"
)

// These tests decide settles and releases against ledger.Memory: the
// ledger's own book, View and rules, with no JetStream.

var (
	t0  = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	bal = events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-12"}
)

func setup(t *testing.T) (*ledger.Memory, *admit.Admitter, *settle.Settler) {
	t.Helper()
	m := ledger.NewMemory()
	require.NoError(t, m.Define(ledger.Budget{Ref: events.BudgetRef{Scope: "org:acme", Period: events.PeriodMonth}, Limit: events.MustMoney("1"), Unit: "USD"}))
	clock := func() time.Time { return t0 }
	a, err := admit.New(m, admit.WithClock(clock))
	require.NoError(t, err)
	s, err := settle.New(m, settle.WithClock(clock))
	require.NoError(t, err)
	return m, a, s
}

func open(t *testing.T, a *admit.Admitter, id, amount string) string {
	t.Helper()
	r, err := a.Admit(context.Background(), events.AdmitRequest{RequestID: id, Scopes: []string{"org:acme"}, Amount: amount})
	require.NoError(t, err)
	require.True(t, r.Admitted)
	return r.ReservationID
}

func TestDecide_SettleMovesReservedToSpentAndRecordsOverrun(t *testing.T) {
	m, a, s := setup(t)
	ctx := context.Background()
	id := open(t, a, "r1", "0.4")
	r, err := s.Settle(ctx, events.SettleRequest{ReservationID: id, Actual: "0.5"})
	require.NoError(t, err)
	require.Equal(t, events.StatusSettled, r.Status)
	require.Equal(t, "0.1", r.Overrun)
	b := m.Balance(bal)
	require.Equal(t, "0.5", b.Spent.String())
	require.Equal(t, "0", b.Reserved.String())
	require.Equal(t, "0.1", b.Overrun.String())
	require.Equal(t, 0, b.Open)

	again, err := s.Settle(ctx, events.SettleRequest{ReservationID: id, Actual: "0.5"})
	require.NoError(t, err)
	require.True(t, again.Replayed, "the same settle again changes nothing")
	_, err = s.Settle(ctx, events.SettleRequest{ReservationID: id, Actual: "0.3"})
	require.ErrorIs(t, err, &events.Error{Code: events.CodeAlreadySettled})
	require.Equal(t, "0.5", m.Balance(bal).Spent.String(), "nothing changed")
}

func TestDecide_ReleaseGivesTheAmountBack(t *testing.T) {
	m, a, s := setup(t)
	ctx := context.Background()
	id := open(t, a, "r1", "0.9")
	r, err := s.Release(ctx, events.ReleaseRequest{ReservationID: id})
	require.NoError(t, err)
	require.Equal(t, events.StatusReleased, r.Status)
	require.Equal(t, "0", m.Balance(bal).Reserved.String())
	open(t, a, "r2", "0.9") // the amount is free again

	_, err = s.Settle(ctx, events.SettleRequest{ReservationID: id, Actual: "0.1"})
	require.ErrorIs(t, err, &events.Error{Code: events.CodeAlreadyReleased})
	_, err = s.Settle(ctx, events.SettleRequest{ReservationID: "rsv_nope", Actual: "0.1"})
	require.ErrorIs(t, err, &events.Error{Code: events.CodeUnknownReservation})
}

// TestDecide_SettleNote: a settle's note is checked before anything is
// decided: one that is not a token (a space, too long) is invalid_request,
// and the reservation stays open; a token settles. (That the note reaches
// the events and the export: the gateway's and the report's tests.) How it
// can fail: without the check the first settle closes the reservation.
func TestDecide_SettleNote(t *testing.T) {
	m, a, s := setup(t)
	ctx := context.Background()
	id := open(t, a, "r1", "0.4")
	for _, note := range []string{"an estimate", "x\ny", strings.Repeat("n", events.MaxNoteLen+1)} {
		_, err := s.Settle(ctx, events.SettleRequest{ReservationID: id, Actual: "0.3", Note: note})
		require.ErrorIs(t, err, &events.Error{Code: events.CodeInvalidRequest}, note)
		require.Equal(t, 1, m.Balance(bal).Open, "nothing decided")
	}
	r, err := s.Settle(ctx, events.SettleRequest{ReservationID: id, Actual: "0.3", Note: "estimate"})
	require.NoError(t, err)
	require.Equal(t, events.StatusSettled, r.Status)
}
