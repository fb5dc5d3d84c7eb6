package ledger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/admit"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/settle"
)

// TestSnapshot_CarriesPricesDefaultsAndAlerts: a snapshot holds the
// pricing table, the defaults per kind, a budget created from a default,
// a priced reservation's quote and the thresholds a balance crossed; a
// replica that loads it holds the book of one that folds the whole
// stream. How it can fail: a field the snapshot drops (a quote, the
// crossed set, a default) makes the two books' views differ.
func TestSnapshot_CarriesPricesDefaultsAndAlerts(t *testing.T) {
	env := snapLayout(t)
	w := startLedger(t, env, snapOpts...)
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cached := events.MustMoney("1.25")
	p, err := w.DefinePrice(ctx, ledger.Price{Model: "gpt-x.1", Unit: "USD", Input: events.MustMoney("2.5"), Output: events.MustMoney("10"), CachedInput: &cached}, now)
	require.NoError(t, err)
	_, err = w.DefineDefault(ctx, "user", ledger.Budget{Ref: events.BudgetRef{Period: events.PeriodMonth}, Limit: events.MustMoney("10"), Unit: "USD",
		Thresholds: events.DefaultThresholds}, now)
	require.NoError(t, err)
	ds := w.DefaultsOf("user")
	require.Len(t, ds, 1)
	created, err := w.CreateFromDefault(ctx, "user:u1", ds[0], now)
	require.NoError(t, err)
	require.True(t, created)
	again, err := w.CreateFromDefault(ctx, "user:u1", ds[0], now)
	require.NoError(t, err)
	require.False(t, again, "created once")
	b, ok := w.Budget(events.BudgetRef{Scope: "user:u1", Period: events.PeriodMonth})
	require.True(t, ok)
	require.Equal(t, ds[0].Def.Revision, b.FromDefault)

	// A priced reservation that crosses 50 %: written as the admitter
	// would write it.
	q := p.Price.Quote(1000, 500000)
	ref := b.Balance(now)
	require.NoError(t, w.Submit(ctx, &rawTx{refs: []events.BalanceRef{ref}, evs: events.Events{
		events.ReservationOpened{ReservationID: "rsv_1", RequestID: "r1", RequestHash: "h", Balance: ref, Amount: q.MaxCost(), Unit: "USD",
			Balances: []events.BalanceRef{ref}, ExpiresAt: now.Add(time.Hour), At: now, Pricing: &q},
		events.ThresholdCrossed{Balance: ref, Threshold: events.MustMoney("0.5"), Limit: b.Limit, Used: q.MaxCost(), Unit: "USD", ReservationID: "rsv_1", At: now},
	}}))
	require.Equal(t, []events.Money{events.MustMoney("0.5")}, w.Balance(ref).Alerted)
	// A void: its tombstone travels in the snapshot too.
	require.NoError(t, w.Submit(ctx, &rawTx{refs: []events.BalanceRef{ref}, evs: events.Events{
		events.RequestVoided{RequestID: "r9", Balance: ref, Scopes: []events.Scope{"user:u1"}, At: now},
	}}))
	require.True(t, w.Voided("r9"))

	info, err := w.Snapshot(ctx)
	require.NoError(t, err)
	fromSnap := startLedger(t, env, snapOpts...)
	whole := startLedger(t, env, append(snapOpts, ledger.WithSnapshotLoad(false))...)
	require.Equal(t, info.Seq, fromSnap.SnapshotStats().Loaded)
	got, _ := bookOf(t, fromSnap)
	full, _ := bookOf(t, whole)
	require.Equal(t, full, got)
	require.Contains(t, got, `"version":`)
	r, ok := fromSnap.Reservation("rsv_1")
	require.True(t, ok)
	require.Equal(t, &q, r.Pricing)
	pr, ok := fromSnap.Price("gpt-x.1")
	require.True(t, ok)
	require.Equal(t, p.Price.Version, pr.Version)
	require.True(t, fromSnap.Voided("r9"))

	// A tail that needs what the snapshot names beyond balances: a
	// reservation priced at the same version and a budget created from
	// the default. An audit from the snapshot folds it (its replay takes
	// each pricing and default key's versions from the stream) and
	// reconciles. How it can fail: without them the tail's quote names a
	// version the replay never saw.
	q2 := p.Price.Quote(10, 1000)
	require.NoError(t, w.Submit(ctx, &rawTx{refs: []events.BalanceRef{ref}, evs: events.Events{
		events.ReservationOpened{ReservationID: "rsv_2", RequestID: "r2", RequestHash: "h", Balance: ref, Amount: q2.MaxCost(), Unit: "USD",
			Balances: []events.BalanceRef{ref}, ExpiresAt: now.Add(time.Hour), At: now, Pricing: &q2},
	}}))
	created, err = w.CreateFromDefault(ctx, "user:u2", ds[0], now)
	require.NoError(t, err)
	require.True(t, created)
	rep, err := projector.Check(ctx, env.JS, env.Layout, projector.WithFromSnapshot())
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.String())
	require.Equal(t, info.Seq, rep.From.Seq)
	rep, err = projector.Check(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.String())
}

// rawTx commits fixed events (a test's stand-in for an admitter).
type rawTx struct {
	refs []events.BalanceRef
	evs  events.Events
}

func (t *rawTx) Balances() []events.BalanceRef { return t.refs }

func (t *rawTx) Decide(ledger.View) (events.Events, error) { return t.evs, nil }

// TestSnapshot_GatewayShapedWindow: the idempotency window of a replica
// whose admits are what an LLM gateway sends (priced from a model, held in
// a key's, a team's and a user's budgets, settled from usage or released)
// is written in a snapshot, loaded by a second replica
// into the book a whole fold makes, and the audit's own decoder finds the
// snapshot equal to its replay, from the stream's start and from the
// snapshot. How it can fail: a part, a quote or a token count the compact
// window entries or the section drop, or that the audit's decoder reads
// otherwise, makes the books or the audit differ.
func TestSnapshot_GatewayShapedWindow(t *testing.T) {
	env := snapLayout(t)
	opts := []ledger.Option{ledger.WithRetention(time.Hour, time.Hour), ledger.WithSnapshotEvery(0, 0)}
	w := startLedger(t, env, opts...)
	ctx := context.Background()
	now := time.Now().UTC()
	for _, m := range []string{"gpt-x", "claude-y"} {
		_, err := w.DefinePrice(ctx, ledger.Price{Model: m, Unit: "USD", Input: events.MustMoney("2.5"), Output: events.MustMoney("10")}, now)
		require.NoError(t, err)
	}
	scopes := []string{"key:k1", "team:t1", "user:u1", "user:u2"}
	for _, s := range scopes {
		_, err := w.PutBudget(ctx, events.BudgetRef{Scope: events.Scope(s), Period: events.PeriodMonth}, events.MustMoney("1000"), "USD", now)
		require.NoError(t, err)
	}
	a, err := admit.New(w)
	require.NoError(t, err)
	s, err := settle.New(w)
	require.NoError(t, err)
	var ids []string
	for i := range 40 {
		rep, err := a.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprintf("g-%d", i), Scopes: []string{"key:k1", "team:t1", scopes[2+i%2]},
			Model: []string{"gpt-x", "claude-y"}[i%2], InputTokens: int64(1000 + i), MaxOutputTokens: 1024, TTL: "1h"})
		require.NoError(t, err)
		require.True(t, rep.Admitted, "%+v", rep.Denial)
		ids = append(ids, rep.ReservationID)
		switch i % 4 {
		case 3:
			_, err = s.Release(ctx, events.ReleaseRequest{ReservationID: rep.ReservationID})
		default:
			_, err = s.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, InputTokens: int64(1000 + i), OutputTokens: int64(10 * i)})
		}
		require.NoError(t, err)
	}
	info, err := w.Snapshot(ctx)
	require.NoError(t, err)
	fromSnap := startLedger(t, env, opts...)
	whole := startLedger(t, env, append(opts, ledger.WithSnapshotLoad(false))...)
	require.Equal(t, info.Seq, fromSnap.SnapshotStats().Loaded)
	got, _ := bookOf(t, fromSnap)
	full, _ := bookOf(t, whole)
	require.Equal(t, full, got)
	r, ok := fromSnap.Reservation(ids[4])
	require.True(t, ok)
	require.Len(t, r.Balances, 3)
	require.NotNil(t, r.Pricing)
	require.EqualValues(t, 1004, r.Pricing.InputTokens)

	rep, err := projector.Check(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.String())
	require.True(t, rep.Snapshot.Verified, "the snapshot equals the replay")
	rep, err = projector.Check(ctx, env.JS, env.Layout, projector.WithFromSnapshot())
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.String())
	require.Equal(t, info.Seq, rep.From.Seq)
}
