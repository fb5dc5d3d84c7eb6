package admit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
)

// alertLedger is memLedger with the admitter's crossings and blocking
// alerts recorded.
func alertLedger(t *testing.T, budgets ...ledger.Budget) (*ledger.Memory, *admit.Admitter, *[]string) {
	t.Helper()
	m := ledger.NewMemory()
	for _, b := range budgets {
		require.NoError(t, m.Define(b))
	}
	var got []string
	a, err := admit.New(m, admit.WithClock(func() time.Time { return t0 }),
		admit.WithAlerts(func(cs []events.ThresholdCrossed) {
			for _, c := range cs {
				got = append(got, events.ThresholdAlert(c).ID)
			}
		}),
		admit.WithBlocking(func(a events.Alert) { got = append(got, a.ID) }))
	require.NoError(t, err)
	return m, a, &got
}

func withThresholds(b ledger.Budget, ths ...string) ledger.Budget {
	for _, th := range ths {
		b.Thresholds = append(b.Thresholds, events.MustMoney(th))
	}
	return b
}

// TestDecide_RaisedLimitRearmsThresholds: a limit raised from 4 to 20
// re-arms the thresholds, so reaching 100 % of 20 crosses 1 again, in the
// definition's arm generation. In an earlier build the balance's crossings
// of the old limit held, and nothing was crossed (this test failed there:
// the second admit crossed nothing). Disabling and enabling does not
// re-arm.
func TestDecide_RaisedLimitRearmsThresholds(t *testing.T) {
	def := withThresholds(usd("org:acme", events.PeriodMonth, "4"), "1")
	m, a, got := alertLedger(t, def)
	ctx := context.Background()
	r, err := a.Admit(ctx, req("r1", "4", "org:acme"))
	require.NoError(t, err)
	require.True(t, r.Admitted)
	require.Equal(t, []string{"org:acme/month/2026-12/1"}, *got)

	def.Disabled = true
	require.NoError(t, m.Define(def))
	def.Disabled = false
	require.NoError(t, m.Define(def))
	def.Limit = events.MustMoney("20")
	require.NoError(t, m.Define(def))
	cur, ok := m.Budget(def.Ref)
	require.True(t, ok)
	arm := cur.Arm
	require.Equal(t, cur.Revision, arm, "the limit's definition is the generation")

	r, err = a.Admit(ctx, req("r2", "15", "org:acme"))
	require.NoError(t, err)
	require.True(t, r.Admitted)
	require.Len(t, *got, 1, "19 of 20 crosses nothing")
	r, err = a.Admit(ctx, req("r3", "1", "org:acme"))
	require.NoError(t, err)
	require.True(t, r.Admitted)
	second := fmt.Sprintf("org:acme/month/2026-12/1/arm%d", arm)
	require.Equal(t, []string{"org:acme/month/2026-12/1", second}, *got)

	// Once per generation.
	def.Limit = events.MustMoney("21")
	def.Disabled = true
	require.NoError(t, m.Define(def))
	def.Disabled = false
	require.NoError(t, m.Define(def))
	cur, _ = m.Budget(def.Ref)
	require.Less(t, cur.Arm, cur.Revision, "the enable after it did not re-arm")
	r, err = a.Admit(ctx, req("r4", "1", "org:acme"))
	require.NoError(t, err)
	require.True(t, r.Admitted)
	third := fmt.Sprintf("org:acme/month/2026-12/1/arm%d", cur.Arm)
	require.Equal(t, []string{"org:acme/month/2026-12/1", second, third}, *got)
	b := m.Balance(events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-12"})
	require.Equal(t, cur.Arm, b.Arm)
	require.Len(t, b.Alerted, 1)
}

// TestDecide_BlockingAlert: a budget with alerts on at 98 % denies an
// admit for its limit: the denial carries a blocking alert (its balance,
// used and limit, the denied request); a check, a budget with alerts off,
// and a denial for another reason carry none. An earlier build had no
// blocking alert at all.
func TestDecide_BlockingAlert(t *testing.T) {
	quiet := usd("org:quiet", events.PeriodMonth, "1")
	off := quiet
	off.Ref.Scope, off.Disabled = "org:off", true
	off = withThresholds(off, "1")
	_, a, got := alertLedger(t, withThresholds(usd("org:acme", events.PeriodMonth, "10"), "1"), quiet, off)
	ctx := context.Background()
	r, err := a.Admit(ctx, req("r1", "9.8", "org:acme"))
	require.NoError(t, err)
	require.True(t, r.Admitted)
	require.Empty(t, *got)

	chk := req("c1", "1", "org:acme")
	chk.Mode = events.ModeCheck
	r, err = a.Admit(ctx, chk)
	require.NoError(t, err)
	require.False(t, r.Admitted)
	for _, q := range []events.AdmitRequest{req("q1", "2", "org:quiet"), req("o1", "1", "org:off")} {
		r, err = a.Admit(ctx, q)
		require.NoError(t, err)
		require.False(t, r.Admitted)
	}
	require.Empty(t, *got)

	r, err = a.Admit(ctx, req("d1", "1", "org:acme"))
	require.NoError(t, err)
	require.False(t, r.Admitted)
	require.Equal(t, []string{"org:acme/month/2026-12/blocking"}, *got)
}
