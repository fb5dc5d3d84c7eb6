package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// garbageKeys are the keys TestReplica_GarbageUnderEveryKey writes four
// bytes under: every kind of key the ledger folds, a balance key of the
// layout before lanes, a lane this layout does not have, and keys no
// version of spendgate writes.
var garbageKeys = []string{
	"balance.x", "lane.0", "lane.1", "lane.7", "budget.org.acme.month", "pricing.gpt-4o",
	"default.user.month", streams.TrustKey, "apikey.k1", "tenantlimits.acme", "unknown", "foo.bar.baz",
}

// TestReplica_GarbageUnderEveryKey: garbage under any key of the ledger
// bucket, a balance written under another lane than the layout gives it
// (a writer with another lane count), and revisions under keys spendgate
// does not know leave every replica serving: each is skipped, counted by
// reason and never folded, the next write of a skipped key lands after it,
// and a replica started on that stream starts and serves. How we know it
// can fail: before the gate, "junk" under balance.x made both replicas exit
// for good ("a balance key outside a lane"), and the wrong-lane balance
// stopped a starting replica.
func TestReplica_GarbageUnderEveryKey(t *testing.T) {
	h := newHarness(t, harnessOpts{replicas: 2, lanes: 2, noCheck: true})
	ctx := ctxT(t)
	h.putBudget("org:acme", "month", "1", "USD")
	_, e := h.admit(events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: "0.1", RequestID: "before"})
	require.Nil(t, e)

	ref := events.BalanceRef{Scope: "org:other", Period: events.PeriodMonth, Instance: "2026-11"}
	right := h.env.Layout.LaneKey(ref)
	wrong := "lane.0"
	if right == wrong {
		wrong = "lane.1"
	}
	rev := events.LaneRevision{Schema: events.SchemaLaneV1, Balances: []events.BalanceRevision{{
		Schema: events.SchemaBalance, Balance: ref, Unit: "USD", Limit: events.MustMoney("10"),
		Spent: events.MustMoney("0"), Reserved: events.MustMoney("0"), Overrun: events.MustMoney("0"), Events: events.Events{},
	}}}
	wrongLane, err := json.Marshal(rev)
	require.NoError(t, err)
	before := make([]int64, len(h.replicas))
	for i, r := range h.replicas {
		before[i] = r.Ledger.Stats().Rejected
	}
	for _, key := range garbageKeys {
		_, err := h.env.JS.Publish(ctx, h.env.Layout.Subject(key), []byte("junk"))
		require.NoError(t, err, key)
	}
	_, err = h.env.JS.Publish(ctx, h.env.Layout.Subject(wrong), wrongLane)
	require.NoError(t, err)
	last, _ := h.streamState()

	for i, r := range h.replicas {
		require.Eventually(t, func() bool { return r.Ledger.Stats().Rejected-before[i] == int64(len(garbageKeys))+1 },
			10*time.Second, 10*time.Millisecond, "replica %d skips every garbage message", i)
		require.NoError(t, r.Ledger.Sync(ctx))
		select {
		case <-r.Failed():
			t.Fatalf("replica %d stopped: %v", i, r.Err())
		default:
		}
	}
	// Serving within a second, on both lanes and through a multi-lane
	// admit (an atomic batch over lanes whose last revisions are garbage).
	h.putBudget("org:other", "month", "1", "USD")
	for i, scopes := range [][]string{{"org:acme"}, {"org:other"}, {"org:acme", "org:other"}} {
		start := time.Now()
		r, e := h.admit(events.AdmitRequest{Scopes: scopes, Amount: "0.1", RequestID: "after-" + string(rune('a'+i))})
		require.Nil(t, e, "%v", scopes)
		require.Less(t, time.Since(start), time.Second, "%v served within a second", scopes)
		require.True(t, r.Admitted)
	}
	require.Equal(t, "0.2", h.budget("org:other", "month").Reserved, "the wrong-lane balance was never folded")

	// A replica started on this stream folds past the garbage and serves.
	nc := h.env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	third, err := replica.Start(ctx, nc, js, replica.Config{Layout: h.env.Layout, SweepInterval: -1, ReadyTimeout: 20 * time.Second})
	require.NoError(t, err)
	defer third.Stop()
	require.GreaterOrEqual(t, third.Ledger.Stats().Rejected, int64(len(garbageKeys))+1)
	require.Eventually(t, func() bool {
		return third.Ledger.Balance(events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}).Reserved.String() == "0.3"
	}, 10*time.Second, 10*time.Millisecond)
	s, err := h.env.JS.Stream(ctx, h.env.Layout.StreamName())
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Greater(t, info.State.LastSeq, last, "writes landed after the garbage")
}

// TestReplica_ReasonsOfGarbage: each garbage message is skipped for the
// reason its key and payload give, so an operator reading the log or the
// metric knows what was written.
func TestReplica_ReasonsOfGarbage(t *testing.T) {
	t.Parallel()
	reasons := &reasonLog{}
	h := newHarness(t, harnessOpts{replicas: 1, lanes: 2, noCheck: true, ledgerOpts: []ledger.Option{ledger.WithObserver(reasons)}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, key := range []string{"balance.x", "lane.7", "nope", "lane.0"} {
		_, err := h.env.JS.Publish(ctx, h.env.Layout.Subject(key), []byte("junk"))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return len(reasons.get()) == 4 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"old-layout", "wrong-lane", "unknown-key", "malformed"}, reasons.get())
}

// reasonLog is a ledger.RejectObserver that records the reasons in order.
type reasonLog struct {
	mu      sync.Mutex
	reasons []string
}

var _ ledger.RejectObserver = (*reasonLog)(nil)

func (r *reasonLog) Committed(int) {}
func (r *reasonLog) Conflicted()   {}
func (r *reasonLog) Rejected(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons = append(r.reasons, reason)
}

func (r *reasonLog) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.reasons...)
}

// TestReplica_OneLedgerConsumer: a replica with every reader on (the spend
// report, the spend series, the feed relay, alerts, denial records)
// reads the ledger stream through one consumer, its fold's: every reader
// is fed by it. How we know it can fail: before, the report, the
// dashboard and the feed relay each opened their own consumer (up to four
// per replica).
func TestReplica_OneLedgerConsumer(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := ctxT(t)
	nc := env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	r, err := replica.Start(ctx, nc, js, replica.Config{Layout: env.Layout, SweepInterval: -1,
		Reports: true, Feed: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Stop()) })
	require.NotNil(t, r.Relay)
	require.NotNil(t, r.Reports)
	require.NotNil(t, r.Series)
	_, err = r.Ledger.PutBudget(ctx, events.BudgetRef{Scope: "org:acme", Period: events.PeriodMonth}, events.MustMoney("1"), "USD", time.Now())
	require.NoError(t, err)
	rep, err := r.Admitter.Admit(ctx, events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: "0.1", RequestID: "one"})
	require.NoError(t, err)
	require.True(t, rep.Admitted)
	testenv.WaitFor(t, 10*time.Second, "the feed holds the events", func() bool { return r.Relay.Relayed() >= 2 })
	s, err := js.Stream(ctx, env.Layout.StreamName())
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, info.State.Consumers, "the ledger stream's consumers")
}

// TestReplica_GarbageUnderUndefinedKeysBounded: a login that may write the
// stream publishes garbage under budget keys no one defined, more of them
// than gate.MaxSkippedOnly, the first under the key of a budget defined
// later. Every replica keeps at most the bound of such heads (its memory
// and its snapshots no longer grow with the garbage), and the budget whose
// skipped head was forgotten is still defined at once: its writer's lost
// compare-and-set catches up past the garbage. How it can fail: without
// the bound each replica holds a head per garbage key; with a bound but no
// catch-up of the forgotten head, the put would answer ledger_busy.
func TestReplica_GarbageUnderUndefinedKeysBounded(t *testing.T) {
	h := newHarness(t, harnessOpts{replicas: 2, noCheck: true})
	ctx := ctxT(t)
	later := streams.BudgetKey(events.BudgetRef{Scope: "team:later", Period: events.PeriodMonth})
	keys := []string{later}
	for i := range gate.MaxSkippedOnly + 100 {
		keys = append(keys, streams.BudgetKey(events.BudgetRef{Scope: events.Scope(fmt.Sprintf("team:g%d", i)), Period: events.PeriodMonth}))
	}
	before := make([]int64, len(h.replicas))
	for i, r := range h.replicas {
		before[i] = r.Ledger.Stats().Rejected
	}
	// In rounds of 500: the client stalls past its 4,000 acks outstanding.
	for start := 0; start < len(keys); start += 500 {
		var acks []jetstream.PubAckFuture
		for _, key := range keys[start:min(start+500, len(keys))] {
			a, err := h.env.JS.PublishAsync(h.env.Layout.Subject(key), []byte("junk"))
			require.NoError(t, err)
			acks = append(acks, a)
		}
		for _, a := range acks {
			select {
			case <-a.Ok():
			case err := <-a.Err():
				require.NoError(t, err)
			case <-ctx.Done():
				t.Fatal("garbage not acknowledged")
			}
		}
	}
	for i, r := range h.replicas {
		require.Eventually(t, func() bool { return r.Ledger.Stats().Rejected-before[i] == int64(len(keys)) },
			30*time.Second, 10*time.Millisecond, "replica %d skips every garbage message", i)
		require.LessOrEqual(t, r.Ledger.Stats().Heads, gate.MaxSkippedOnly+10, "replica %d", i)
	}
	start := time.Now()
	h.putBudget("team:later", "month", "1", "USD")
	require.Less(t, time.Since(start), 5*time.Second)
	r, e := h.admit(events.AdmitRequest{Scopes: []string{"team:later"}, Amount: "0.5", RequestID: "later-1"})
	require.Nil(t, e)
	require.True(t, r.Admitted)
}
