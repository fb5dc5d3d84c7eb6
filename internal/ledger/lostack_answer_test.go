package ledger_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/testenv"
)

// loseFirstAck lands the first write to a subject containing part once
// armed, and answers it with a timeout, as a lost acknowledgement would.
type loseFirstAck struct {
	part  string
	armed atomic.Bool
	lost  atomic.Int32
	// then, if set, runs after the write landed, before the timeout is
	// returned.
	then func(ctx context.Context)
}

func (s *loseFirstAck) publish(ctx context.Context, m *nats.Msg, send func(context.Context, *nats.Msg) (*nats.Msg, error)) (*nats.Msg, error) {
	ack, err := send(ctx, m)
	if err == nil && strings.Contains(m.Subject, s.part) && s.armed.CompareAndSwap(true, false) {
		s.lost.Add(1)
		if s.then != nil {
			s.then(ctx)
		}
		return nil, nats.ErrTimeout
	}
	return ack, err
}

// A definition write that landed but whose acknowledgement was lost is
// answered as what it was: a new budget (Existed false), not one that
// "existed" because the retry found it already there. How we know it can
// fail: before, the retry decided again, found the key holding the new
// definition and answered Existed with nothing changed.
func TestDefine_LostAckAnsweredAsWritten(t *testing.T) {
	env := testenv.New(t)
	h := &loseFirstAck{part: ".budget."}
	h.armed.Store(true)
	l := startLedger(t, env, ledger.PublishHookForTesting(h.publish))
	before := lastSeq(t, env)
	ch, err := l.DefineBudget(context.Background(), ledger.Budget{Ref: bal.Budget(), Limit: events.MustMoney("1"), Unit: "USD"}, t0)
	require.NoError(t, err)
	require.EqualValues(t, 1, h.lost.Load(), "the write's acknowledgement was lost")
	require.False(t, ch.Existed, "a budget created by a write whose ack was lost")
	require.Equal(t, before+1, lastSeq(t, env), "one write")
	require.Equal(t, "1", ch.Budget.Limit.String())
}

// A group commit whose write landed but whose acknowledgement was lost is
// answered with the decisions it wrote, once the catch-up finds its
// revision at the lane's head: the reservation opened once, not decided
// again on a book that already holds it. How we know it can fail: before,
// the retry decided again; openTx (which has no idempotency of its own)
// opened a second reservation, where a real admit answered "replayed".
func TestSubmit_LostAckAnsweredAsWritten(t *testing.T) {
	env := testenv.New(t)
	h := &loseFirstAck{part: ".lane."}
	l := startLedger(t, env, ledger.PublishHookForTesting(h.publish))
	_, err := l.PutBudget(context.Background(), bal.Budget(), events.MustMoney("1"), "USD", t0)
	require.NoError(t, err)
	h.armed.Store(true)
	before := lastSeq(t, env)
	tx := &openTx{id: "r1", amount: events.MustMoney("0.1")}
	require.NoError(t, l.Submit(context.Background(), tx))
	require.EqualValues(t, 1, h.lost.Load(), "the write's acknowledgement was lost")
	require.False(t, tx.denied)
	require.Equal(t, before+1, lastSeq(t, env), "one write")
	require.Equal(t, 1, l.Balance(bal).Open, "opened once")
}

// A group commit whose write landed, whose acknowledgement was lost, and on
// top of which another replica wrote before the catch-up, is answered with
// the decisions it wrote too: the lane's first revision after the one the
// write required is the write's own. How we know it can fail: before, only
// the lane's head was compared, which held the other replica's revision;
// the retry decided again and openTx opened its reservation a second time
// (3 open, not 2), where a settle would have been answered "already
// closed" and a sweeper's expiry "replayed" (uncounted).
func TestSubmit_LostAckUnderAnotherWriteAnsweredAsWritten(t *testing.T) {
	env := testenv.New(t)
	other := startLedger(t, env)
	var otherErr error
	h := &loseFirstAck{part: ".lane.", then: func(ctx context.Context) {
		otherErr = other.Submit(ctx, &openTx{id: "o1", amount: events.MustMoney("0.1")})
	}}
	l := startLedger(t, env, ledger.PublishHookForTesting(h.publish))
	_, err := l.PutBudget(context.Background(), bal.Budget(), events.MustMoney("1"), "USD", t0)
	require.NoError(t, err)
	require.NoError(t, other.Sync(context.Background()))
	h.armed.Store(true)
	before := lastSeq(t, env)
	tx := &openTx{id: "r1", amount: events.MustMoney("0.1")}
	require.NoError(t, l.Submit(context.Background(), tx))
	require.EqualValues(t, 1, h.lost.Load(), "the write's acknowledgement was lost")
	require.NoError(t, otherErr, "the other replica wrote on top of it")
	require.False(t, tx.denied)
	require.Equal(t, before+2, lastSeq(t, env), "one write each")
	require.NoError(t, l.Sync(context.Background()))
	require.Equal(t, 2, l.Balance(bal).Open, "r1 opened once, beside o1")
}

// A definition write that landed, whose acknowledgement was lost, and on
// top of which another replica wrote a newer definition before the
// catch-up, is answered as written, and the newer definition stands. How
// we know it can fail: before, the head held the other replica's revision,
// so the retry decided again and wrote its limit a second time, over the
// newer one (one write more, and the limit back at 1).
func TestDefine_LostAckUnderAnotherWriteAnsweredAsWritten(t *testing.T) {
	env := testenv.New(t)
	other := startLedger(t, env)
	var otherErr error
	h := &loseFirstAck{part: ".budget.", then: func(ctx context.Context) {
		_, otherErr = other.PutBudget(ctx, bal.Budget(), events.MustMoney("2"), "USD", t0)
	}}
	h.armed.Store(true)
	l := startLedger(t, env, ledger.PublishHookForTesting(h.publish))
	before := lastSeq(t, env)
	ch, err := l.DefineBudget(context.Background(), ledger.Budget{Ref: bal.Budget(), Limit: events.MustMoney("1"), Unit: "USD"}, t0)
	require.NoError(t, err)
	require.EqualValues(t, 1, h.lost.Load(), "the write's acknowledgement was lost")
	require.NoError(t, otherErr, "the other replica wrote on top of it")
	require.False(t, ch.Existed, "a budget created by a write whose ack was lost")
	require.Equal(t, "1", ch.Budget.Limit.String())
	require.Equal(t, before+2, lastSeq(t, env), "one write each")
	require.NoError(t, l.Sync(context.Background()))
	b, ok := l.Budget(bal.Budget())
	require.True(t, ok)
	require.Equal(t, "2", b.Limit.String(), "the newer definition stands")
}
