package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// countBatches counts the batch messages sent to endpoint (a plain
// subscription sees a copy of every message).
func countBatches(t *testing.T, env *testenv.Env, endpoint string) *batchCounter {
	t.Helper()
	nc := env.Connect(t)
	sub, err := nc.SubscribeSync(env.Layout.Endpoint(endpoint))
	require.NoError(t, err)
	require.NoError(t, sub.SetPendingLimits(-1, -1))
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	return &batchCounter{nc: nc, sub: sub}
}

// batchCounter is countBatches's subscription; its messages are never
// taken, only counted.
type batchCounter struct {
	nc  *nats.Conn
	sub *nats.Subscription
}

// seen returns how many messages the counter has received: every one sent
// before seen was called. The flush's answer comes after every message the
// server sent the counter before it, and the connection queues each on the
// subscription as it reads it (a handler run on its own goroutine, as a
// plain Subscribe's is, could count one later than the answers its
// senders got).
func (b *batchCounter) seen(t *testing.T) int {
	t.Helper()
	require.NoError(t, b.nc.Flush())
	n, _, err := b.sub.Pending()
	require.NoError(t, err)
	return n
}

// 200 concurrent admits of 0.05 against a 1.00 budget, from two clients on
// two connections (as two processes would be) to two replicas, through
// the coalescing transport: exactly 20 are admitted. The cap is enforced
// by the ledger's group commit deciding every item against the balance it
// commits on (compare-and-set on the lane); with the check removed from
// the admit's Decide, or items decided against a view the commit does not
// check, more than 20 would be admitted (service's blind-writes test shows
// the shape of that failure).
func TestBatching_capExactFromTwoClients(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	startService(t, env)
	batches := countBatches(t, env, streams.EndpointAdmitBatch)
	clients := []*client.Client{newClient(t, env.Connect(t)), newClient(t, env.Connect(t))}
	putBudget(t, clients[0], "org:acme", "1.00")

	const n = 200
	var admitted, denied atomic.Int64
	errs := make(chan error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := clients[i%2].Admit(ctxT(t), admitReq("0.05", "org:acme"))
			var de *client.DeniedError
			switch {
			case err == nil && res != nil:
				admitted.Add(1)
			case errors.As(err, &de) && de.Denial.Reason == events.ReasonLimitReached:
				denied.Add(1)
			default:
				errs <- fmt.Errorf("admit %d: %v", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.EqualValues(t, 20, admitted.Load())
	require.EqualValues(t, n-20, denied.Load())
	v := budget(t, clients[0], "org:acme")
	requireMoney(t, "1.00", v.Reserved)
	require.EqualValues(t, 20, v.Open)
	require.Positive(t, batches.seen(t), "concurrent admits were coalesced into batch messages")
}

// The reply of a whole batch is lost: every caller's attempt times out and
// is retried with its own request id, and each item reserves once.
func TestBatching_retryAfterLostBatchReply(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	p := newDropProxy(t, env, streams.EndpointAdmitBatch)
	c := newClient(t, env.Connect(t), client.WithPrefix("test."), client.WithTimeout(time.Second),
		client.WithRetries(3), client.WithBatching(client.MaxLinger, 64))
	putBudget(t, c, "org:acme", "1.00")

	const n = 16
	ids := make([]string, n)
	replayed := make([]bool, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := c.Admit(ctxT(t), admitReq("0.01", "org:acme"))
			if errs[i] = err; err == nil {
				ids[i], replayed[i] = res.ID(), res.Reply().Replayed
			}
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "admit %d", i)
	}
	sent := p.requests(streams.EndpointAdmitBatch)
	require.NotEmpty(t, sent, "the admits were coalesced")
	var first events.BatchRequest
	require.NoError(t, json.Unmarshal([]byte(sent[0]), &first))
	lost := 0
	for _, r := range replayed {
		if r {
			lost++
		}
	}
	require.Equal(t, len(first.Items), lost, "every item of the lost batch was retried and answered as a replay")
	unique := map[string]bool{}
	for _, id := range ids {
		unique[id] = true
	}
	require.Len(t, unique, n, "one reservation per caller")
	v := budget(t, c, "org:acme")
	requireMoney(t, "0.16", v.Reserved, "reserved once per item")
	require.EqualValues(t, n, v.Open)
}

// gateProxy stands between a client with prefix "test." and the service
// and holds every admit batch until proceed is closed; it reports the
// request ids of each batch on batches.
type gateProxy struct {
	batches chan []string
	proceed chan struct{}
}

func newGateProxy(t *testing.T, env *testenv.Env) *gateProxy {
	t.Helper()
	p := &gateProxy{batches: make(chan []string, 16), proceed: make(chan struct{})}
	nc := env.Connect(t)
	sub, err := nc.Subscribe("test.>", func(m *nats.Msg) {
		endpoint := m.Subject[len("test."):]
		go func() {
			if endpoint == streams.EndpointAdmitBatch {
				var b events.BatchRequest
				_ = json.Unmarshal(m.Data, &b)
				var ids []string
				for _, it := range b.Items {
					var r events.AdmitRequest
					_ = json.Unmarshal(it, &r)
					ids = append(ids, r.RequestID)
				}
				p.batches <- ids
				<-p.proceed
			}
			reply, err := nc.RequestMsg(&nats.Msg{Subject: env.Layout.Endpoint(endpoint), Data: m.Data, Header: m.Header}, waitTimeout)
			if err != nil {
				t.Errorf("proxy: forward %s: %v", endpoint, err)
				return
			}
			_ = m.RespondMsg(&nats.Msg{Data: reply.Data, Header: reply.Header})
		}()
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	return p
}

// One caller of a coalesced batch gives up while the batch is in flight:
// it is told ctx's error, the reservation the batch made for it is
// released, and the other callers of the batch are admitted as usual.
func TestBatching_cancelInsideBatch(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	p := newGateProxy(t, env)
	c := newClient(t, env.Connect(t), client.WithPrefix("test."), client.WithBatching(client.MaxLinger, 64))
	putBudget(t, c, "org:acme", "1.00")

	const n = 8
	ctxs := map[string]context.CancelFunc{}
	results := map[string]chan error{}
	for i := range n {
		id := fmt.Sprintf("req-%d", i)
		ctx, cancel := context.WithCancel(ctxT(t))
		t.Cleanup(cancel)
		res := make(chan error, 1)
		ctxs[id], results[id] = cancel, res
		go func() {
			req := admitReq("0.01", "org:acme")
			req.RequestID = id
			_, err := c.Admit(ctx, req)
			res <- err
		}()
	}
	var batch []string
	select {
	case batch = <-p.batches:
	case <-time.After(waitTimeout):
		t.Fatal("no batch was sent")
	}
	victim := batch[0]
	ctxs[victim]()
	select {
	case err := <-results[victim]:
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, client.ErrUnavailable)
	case <-time.After(waitTimeout):
		t.Fatal("the cancelled caller did not return")
	}
	close(p.proceed)
	for id, ch := range results {
		if id == victim {
			continue
		}
		select {
		case err := <-ch:
			require.NoError(t, err, id)
		case <-time.After(waitTimeout):
			t.Fatalf("%s did not return", id)
		}
	}
	// The batch admitted the victim's item after it left; the client
	// releases it. Wait for that, bounded.
	testenv.WaitFor(t, waitTimeout, "the abandoned reservation released", func() bool {
		return budget(t, c, "org:acme").Open == n-1
	})
	requireMoney(t, fmt.Sprintf("0.0%d", n-1), budget(t, c, "org:acme").Reserved)
	// The victim's request id was voided (the client voids the request
	// id of an admit whose caller gave up): a retry does not reserve
	// again. The void runs in the background, so wait for it, bounded.
	req := admitReq("0.01", "org:acme")
	req.RequestID = victim
	testenv.WaitFor(t, waitTimeout, "the victim's request id voided", func() bool {
		_, err := c.Admit(ctxT(t), req)
		var ee *events.Error
		return errors.As(err, &ee) && ee.Code == events.CodeRequestVoided
	})
	v := budget(t, c, "org:acme")
	require.Equal(t, int64(n-1), v.Open, "the retries reserved nothing")
}

func TestWithBriefReplies(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	full := newClient(t, env.Connect(t))
	brief := newClient(t, env.Connect(t), client.WithBriefReplies())
	putBudget(t, full, "org:acme", "1.00")
	res, err := full.Admit(ctxT(t), admitReq("0.10", "org:acme"))
	require.NoError(t, err)
	require.Len(t, res.Reply().Budgets, 1)
	res, err = brief.Admit(ctxT(t), admitReq("0.10", "org:acme"))
	require.NoError(t, err)
	require.Empty(t, res.Reply().Budgets)
	require.Len(t, res.Balances(), 1)
	_, err = res.Settle(ctxT(t), "0.05")
	require.NoError(t, err)
}

// Large requests are split over several batch messages, each within the
// service's and the connection's payload limits.
func TestBatching_largeItemsSplit(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	c := newClient(t, env.Connect(t), client.WithBatching(client.MaxLinger, 256))
	putBudget(t, c, "org:acme", "1000")
	md := map[string]string{}
	for i := range 16 {
		md[fmt.Sprintf("k%02d", i)] = strings.Repeat("x", 250)
	}
	const n = 200 // about 4.5 KB each: 900 KB in all
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := admitReq("0.01", "org:acme")
			req.Metadata = md
			_, err := c.Admit(ctxT(t), req)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, n, budget(t, c, "org:acme").Open)
}

// A service without the batch endpoints (an older one): a batch finds no
// responders, and its items are sent one by one instead.
func TestBatching_fallbackWithoutBatchEndpoints(t *testing.T) {
	env := testenv.New(t)
	var singles atomic.Int64
	sub, err := env.Conn.Subscribe(env.Layout.Endpoint(streams.EndpointAdmit), func(m *nats.Msg) {
		singles.Add(1)
		var req events.AdmitRequest
		_ = json.Unmarshal(m.Data, &req)
		data, _ := json.Marshal(events.AdmitReply{Admitted: true, RequestID: req.RequestID, ReservationID: "rsv_" + req.RequestID, Status: events.StatusOpen})
		_ = m.Respond(data)
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, env.Conn.Flush())
	c := newClient(t, env.Connect(t), client.WithBatching(client.MaxLinger, 64))

	const n = 32
	errs := make(chan error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req := admitReq("0.01", "org:acme")
			req.RequestID = fmt.Sprintf("r%d", i)
			res, err := c.Admit(ctxT(t), req)
			if err == nil && res.ID() != "rsv_"+req.RequestID {
				err = fmt.Errorf("%s got %s", req.RequestID, res.ID())
			}
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, n, singles.Load(), "every admit reached the single endpoint once")
}

// The callers of a batch just answered call again at once (an admit's
// settle): once all of them have, their calls go without waiting out the
// linger. With a 250 ms linger (past what users may set, so that the
// bound holds on busy cores), the median settle of 8 callers cycling
// together is far below it; if the pending calls waited for the linger
// whenever answered callers were expected (the flush on the last
// expected arrival removed), every settle after a batched admit would
// take at least 250 ms and the median would be above it.
func TestBatching_returningCallersDoNotWaitOutLinger(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	const linger = 250 * time.Millisecond
	c := newClient(t, env.Connect(t), client.WithBatching(client.MaxLinger, 64))
	client.SetLinger(c, linger)
	putBudget(t, c, "org:acme", "1000")

	const callers, cycles = 8, 6
	lat := make(chan time.Duration, callers*cycles)
	errs := make(chan error, callers*cycles)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range cycles {
				res, err := c.Admit(ctxT(t), admitReq("0.01", "org:acme"))
				if err != nil {
					errs <- err
					return
				}
				t0 := time.Now()
				if _, err := res.Settle(ctxT(t), "0.01"); err != nil {
					errs <- err
					return
				}
				lat <- time.Since(t0)
			}
		}()
	}
	wg.Wait()
	close(errs)
	close(lat)
	for err := range errs {
		t.Fatal(err)
	}
	var all []time.Duration
	for d := range lat {
		all = append(all, d)
	}
	slices.Sort(all)
	require.Len(t, all, callers*cycles)
	require.Less(t, all[len(all)/2], linger, "median settle %s, all %v", all[len(all)/2], all)
}

// cycle runs callers goroutines of cycles admit+settle each through c and
// returns the first error.
func cycle(t *testing.T, c *client.Client, callers, cycles int, scope string) error {
	t.Helper()
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			if err := cycleN(t, c, cycles, scope); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// cycleN runs n admit+settle cycles of 0.01 on scope through c, one after
// the other, and returns the first error.
func cycleN(t *testing.T, c *client.Client, n int, scope string) error {
	for range n {
		res, err := c.Admit(ctxT(t), admitReq("0.01", scope))
		if err == nil {
			_, err = res.Settle(ctxT(t), "0.01")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Callers that admit and settle at once share messages: the client sends
// items of both kinds as one mixed batch (spendgate.batch), and every
// call is answered as its own. If the client kept one batch per kind, no
// message would reach the mixed subject and the count would be zero.
//
// Half the callers start with a reservation open and settle it first,
// while the other half admit: without that, callers that start together
// can stay in step (all admitting, then all settling), and every batch
// is of one kind. A round in which scheduling still kept the kinds apart
// is run again, up to a bound.
func TestBatching_mixedKindsShareMessages(t *testing.T) {
	env := testenv.New(t)
	startService(t, env)
	mixed := countBatches(t, env, streams.EndpointBatch)
	c := newClient(t, env.Connect(t), client.WithBatching(client.MaxLinger, 64))
	putBudget(t, c, "org:acme", "1000")

	const callers, cycles, maxRounds = 16, 10, 10
	rounds := 0
	for mixed.seen(t) == 0 {
		require.Less(t, rounds, maxRounds, "no mixed batch was sent in %d rounds", rounds)
		rounds++
		held := make([]*client.Reservation, callers/2)
		for i := range held {
			res, err := c.Admit(ctxT(t), admitReq("0.01", "org:acme"))
			require.NoError(t, err)
			held[i] = res
		}
		start := make(chan struct{})
		errs := make(chan error, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				<-start
				var err error
				if i < len(held) {
					_, err = held[i].Settle(ctxT(t), "0.01")
				}
				if err == nil {
					err = cycleN(t, c, cycles, "org:acme")
				}
				if err != nil {
					errs <- err
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		require.NoError(t, <-errs)
	}
	b, err := c.GetBudget(ctxT(t), events.BudgetGetRequest{Scope: "org:acme", Period: "month"})
	require.NoError(t, err)
	// 0.01 for each of a round's callers*cycles cycles and callers/2 held.
	requireMoney(t, events.MustMoney("0.01").Mul(events.MoneyFromInt(int64(rounds*(callers*cycles+callers/2)))).String(), b.Spent)
	requireMoney(t, "0", b.Reserved)
	require.Zero(t, b.Open)
}

// A service without the mixed batch endpoint (an older replica) still
// answers every call: once the mixed batch found no responders, the
// client sends a batch per kind. Without that fallback, the batch path's
// own fallback (no batch endpoints at all) would send every item alone
// for a while, and the singles would outnumber the batched items.
func TestBatching_mixedFallsBackToBatchPerKind(t *testing.T) {
	env := testenv.New(t)
	var singles, batched atomic.Int64
	var mu sync.Mutex
	seq := 0
	answer := func(kind string, body []byte) []byte {
		mu.Lock()
		defer mu.Unlock()
		seq++
		if kind == streams.EndpointAdmit {
			var req events.AdmitRequest
			require.NoError(t, json.Unmarshal(body, &req))
			data, _ := json.Marshal(events.AdmitReply{Admitted: true, RequestID: req.RequestID, ReservationID: fmt.Sprintf("rsv_%d", seq), Amount: req.Amount, Unit: "USD", Status: events.StatusOpen})
			return data
		}
		var req events.SettleRequest
		require.NoError(t, json.Unmarshal(body, &req))
		data, _ := json.Marshal(events.CloseReply{ReservationID: req.ReservationID, Status: events.StatusSettled, Actual: req.Actual})
		return data
	}
	for _, kind := range []string{streams.EndpointAdmit, streams.EndpointSettle} {
		sub, err := env.Conn.Subscribe(env.Layout.Endpoint(kind), func(m *nats.Msg) {
			singles.Add(1)
			_ = m.Respond(answer(kind, m.Data))
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		sub, err = env.Conn.Subscribe(env.Layout.Endpoint(kind+".batch"), func(m *nats.Msg) {
			var req events.BatchRequest
			require.NoError(t, json.Unmarshal(m.Data, &req))
			var rep events.BatchReply
			for _, it := range req.Items {
				rep.Items = append(rep.Items, answer(kind, it))
			}
			batched.Add(int64(len(req.Items)))
			data, _ := json.Marshal(rep)
			_ = m.Respond(data)
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	require.NoError(t, env.Conn.Flush())
	c := newClient(t, env.Connect(t), client.WithBatching(client.MaxLinger, 64))

	require.NoError(t, cycle(t, c, 16, 20, "org:acme"))
	require.Greater(t, batched.Load(), singles.Load(), "batched %d, singles %d", batched.Load(), singles.Load())
}
