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
}

func (s *loseFirstAck) publish(ctx context.Context, m *nats.Msg, send func(context.Context, *nats.Msg) (*nats.Msg, error)) (*nats.Msg, error) {
	ack, err := send(ctx, m)
	if err == nil && strings.Contains(m.Subject, s.part) && s.armed.CompareAndSwap(true, false) {
		s.lost.Add(1)
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
