package alerting_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/alerting"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/metrics"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// receiver is a webhook receiver that answers 503 while down and records
// each body it takes while up.
type receiver struct {
	srv  *httptest.Server
	up   atomic.Bool
	mu   sync.Mutex
	got  []alerting.WebhookBody
	keys []string
	// refused counts the POSTs answered 503.
	refused atomic.Int64
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !r.up.Load() {
			r.refused.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		data, err := io.ReadAll(req.Body)
		var b alerting.WebhookBody
		if err == nil {
			err = json.Unmarshal(data, &b)
		}
		if err != nil || req.Header.Get("Content-Type") != "application/json" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.got = append(r.got, b)
		r.keys = append(r.keys, req.Header.Get("Idempotency-Key"))
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) bodies() ([]alerting.WebhookBody, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]alerting.WebhookBody(nil), r.got...), append([]string(nil), r.keys...)
}

// runSink runs a sink on env until the test ends.
func runSink(t *testing.T, env *testenv.Env, cfg alerting.SinkConfig) *alerting.Sink {
	t.Helper()
	s, err := alerting.NewSink(env.JS, env.Layout, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// The consumer delivers new alerts only (DeliverNew, unless FromStart):
	// wait until Run has made it, so that an alert the test causes next is
	// one it must deliver.
	require.Eventually(t, func() bool {
		st, err := env.JS.Stream(ctx, env.Layout.AlertStreamName())
		if err != nil {
			return false
		}
		_, err = st.Consumer(ctx, cfg.Durable)
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "the sink's consumer %s exists", cfg.Durable)
	return s
}

// consumerDone waits until the sink's consumer has every stored alert
// acknowledged or terminated: nothing more can be delivered.
func consumerDone(t *testing.T, env *testenv.Env, durable string) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		s, err := env.JS.Stream(ctx, env.Layout.AlertStreamName())
		if err != nil {
			return false
		}
		c, err := s.Consumer(ctx, durable)
		if err != nil {
			return false
		}
		ci, err := c.Info(ctx)
		if err != nil {
			return false
		}
		return ci.NumAckPending == 0 && ci.NumPending == 0 && ci.AckFloor.Stream == s.CachedInfo().State.LastSeq
	}, 30*time.Second, 10*time.Millisecond, "the sink's consumer has acknowledged every alert")
}

// TestSink_ReceiverDownWhenCrossed: a replica crosses 80 % of a budget
// while the webhook answers 503 (the sink counts each failed attempt and
// naks with a delay); once the webhook is up the alert arrives, exactly
// once, as Slack-compatible JSON with the alert's fields, and the
// consumer holds nothing more to deliver. Without retries (an ack on
// failure, or no redelivery) nothing would arrive; without the ack after
// the 2xx the alert would arrive again after AckWait (the consumer check
// would not pass).
func TestSink_ReceiverDownWhenCrossed(t *testing.T) {
	env := testenv.New(t)
	now := func() time.Time { return time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC) }
	nc := env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	r, err := replica.Start(context.Background(), nc, js, replica.Config{Layout: env.Layout, Now: now, SweepInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Stop()) })

	rcv := newReceiver(t)
	m := metrics.NewAlertSink(nil)
	runSink(t, env, alerting.SinkConfig{URL: rcv.srv.URL, Durable: "hook", RetryBase: 20 * time.Millisecond,
		RetryMax: 100 * time.Millisecond, MaxDeliver: 1000, Metrics: m})

	ctx := context.Background()
	_, err = r.Ledger.EditBudget(ctx, events.BudgetRef{Scope: "team:search", Period: events.PeriodMonth}, "",
		func(ledger.Budget, bool) (ledger.Budget, error) {
			return ledger.Budget{Ref: events.BudgetRef{Scope: "team:search", Period: events.PeriodMonth}, Limit: events.MustMoney("10"),
				Unit: "USD", Thresholds: []events.Money{events.MustMoney("0.8")}}, nil
		}, now())
	require.NoError(t, err)
	a, err := r.Admitter.Admit(ctx, events.AdmitRequest{RequestID: "big", Scopes: []string{"team:search"}, Amount: "8.5"})
	require.NoError(t, err)
	require.True(t, a.Admitted)

	// Down: attempts fail and are counted (the sink counts a failure once
	// the receiver's 503 reached it, after the receiver counted it: wait
	// for both).
	require.Eventually(t, func() bool {
		return rcv.refused.Load() >= 3 && testutil.ToFloat64(m.Failures.WithLabelValues(metrics.SinkFailStatus)) >= 3
	}, 30*time.Second, 5*time.Millisecond)
	require.Zero(t, testutil.ToFloat64(m.Deliveries))

	// Up: it arrives, once.
	rcv.up.Store(true)
	require.Eventually(t, func() bool { got, _ := rcv.bodies(); return len(got) > 0 }, 30*time.Second, 5*time.Millisecond)
	consumerDone(t, env, "hook")
	got, keys := rcv.bodies()
	require.Len(t, got, 1)
	b := got[0]
	id := "team:search/month/2026-12/0.8"
	require.Equal(t, []string{id}, keys)
	require.Equal(t, "team:search per month (2026-12): 80% of the limit reached - 8.5 of 10 USD used", b.Text)
	require.Equal(t, events.AlertThreshold, b.Alert.Kind)
	require.Equal(t, id, b.Alert.ID)
	require.Equal(t, "8.5", b.Alert.Used.String())
	require.Equal(t, a.ReservationID, b.Alert.ReservationID)
	require.Equal(t, 1.0, testutil.ToFloat64(m.Deliveries))
	require.Zero(t, testutil.ToFloat64(m.Undelivered))
}

// TestSink_GivesUpAfterMaxDeliver: a webhook that never takes the alert
// (answering 503, or not listening at all) gets MaxDeliver attempts, each
// counted by its reason; then the alert is counted undelivered and
// terminated (the consumer holds nothing more), and nothing was counted
// delivered.
func TestSink_GivesUpAfterMaxDeliver(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close() // nothing listens there now
	for _, tc := range []struct {
		name, reason string
		url          func(*receiver) string
	}{
		{"503", metrics.SinkFailStatus, func(r *receiver) string { return r.srv.URL + "/services/secret-token" }},
		{"closed listener", metrics.SinkFailTransport, func(*receiver) string { return closed.URL + "/services/secret-token" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testenv.New(t)
			_, err := streams.EnsureAlerts(context.Background(), env.JS, env.Layout)
			require.NoError(t, err)
			rcv := newReceiver(t) // never up
			m := metrics.NewAlertSink(nil)
			var logs testenv.LogBuffer
			runSink(t, env, alerting.SinkConfig{URL: tc.url(rcv), Durable: "hook", RetryBase: 10 * time.Millisecond,
				RetryMax: 20 * time.Millisecond, MaxDeliver: 3, Timeout: 5 * time.Second, Metrics: m,
				Log: slog.New(slog.NewTextHandler(&logs, nil))})
			consumerReady(t, env, "hook")

			p := alerting.New(env.JS, env.Layout)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = p.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
			bal := events.BalanceRef{Scope: "org:acme", Period: events.PeriodDay, Instance: "2026-12-02"}
			p.Blocked(events.BlockingAlert(bal, "USD", events.MustMoney("5"), events.MustMoney("4.9"), "1", "r1", 0, time.Now()))

			require.Eventually(t, func() bool { return testutil.ToFloat64(m.Undelivered) == 1 }, 30*time.Second, 5*time.Millisecond)
			consumerDone(t, env, "hook")
			require.Equal(t, 3.0, testutil.ToFloat64(m.Failures.WithLabelValues(tc.reason)))
			require.Zero(t, testutil.ToFloat64(m.Deliveries))
			// Each attempt was logged, never with the URL's secret path.
			require.Contains(t, logs.String(), "giving up")
			require.NotContains(t, logs.String(), "secret-token")
		})
	}
}

// consumerReady waits until the sink's durable consumer exists.
func consumerReady(t *testing.T, env *testenv.Env, durable string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := env.JS.Consumer(context.Background(), env.Layout.AlertStreamName(), durable)
		return err == nil
	}, 30*time.Second, 5*time.Millisecond)
}

// TestPublisher_OncePerAlert: two publishers (two replicas) publishing the
// same alerts store each once; publishing them again after the dedupe
// window would be refused by the subject's expectation (simulated here by
// a third publisher whose Nats-Msg-Id differs in nothing - the stream
// answers Duplicate within the window - and by checking the stream's
// messages per subject). A blocked budget denied many times is queued once
// per publisher.
func TestPublisher_OncePerAlert(t *testing.T) {
	env := testenv.New(t)
	_, err := streams.EnsureAlerts(context.Background(), env.JS, env.Layout)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	pubs := []*alerting.Publisher{alerting.New(env.JS, env.Layout), alerting.New(env.JS, env.Layout)}
	for _, p := range pubs {
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.Run(ctx) }()
	}
	bal := events.BalanceRef{Scope: "org:acme", Period: events.PeriodDay, Instance: "2026-12-02"}
	for i := range 5 {
		for _, p := range pubs {
			p.Blocked(events.BlockingAlert(bal, "USD", events.MustMoney("5"), events.MustMoney("4.9"), "1", "r"+string(rune('0'+i)), 0, time.Now()))
		}
	}
	require.Eventually(t, func() bool {
		return pubs[0].Published()+pubs[0].Duplicates()+pubs[1].Published()+pubs[1].Duplicates() == 2
	}, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, uint64(1), pubs[0].Published()+pubs[1].Published())

	s, err := env.JS.Stream(context.Background(), env.Layout.AlertStreamName())
	require.NoError(t, err)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs)

	// Past the dedupe window (a new id for the same subject stands in for
	// it: the window no longer remembers the id), the subject's
	// expectation still refuses a second copy.
	msg := events.BlockingAlert(bal, "USD", events.MustMoney("5"), events.MustMoney("4.9"), "1", "late", 0, time.Now())
	data, err := events.EncodeAlert(msg)
	require.NoError(t, err)
	_, err = env.JS.Publish(context.Background(), env.Layout.AlertMsgSubject(msg), data,
		jetstream.WithMsgID("another-id"), jetstream.WithExpectLastSequencePerSubject(0))
	var apiErr *jetstream.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, jetstream.JSErrCodeStreamWrongLastSequence, apiErr.ErrorCode)
}

// TestAlerts_ForgedFirstKeepsNothingOut: a login that may publish alerts
// (the replica's) publishes, before a budget blocks, a well-formed alert
// of its own on that alert's subject, under the alert's id as
// Nats-Msg-Id (both predictable), and another alert for a budget that
// never alerted. The publisher, signing, finds the subject taken by
// something no trusted key signed and publishes after it (counted
// forged); the sink, given the trusted keys, delivers the genuine alert
// once and drops both forged ones (counted). How it can fail: a
// publisher that takes a taken subject (or a duplicate id) for its alert
// stored stores nothing, and the webhook gets the forger's alert instead;
// a sink that delivers what it reads delivers both forged alerts.
func TestAlerts_ForgedFirstKeepsNothingOut(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	_, err := streams.EnsureAlerts(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	s, err := signing.NewEphemeral()
	require.NoError(t, err)
	ks, err := signing.NewKeySet([]signing.Key{{Public: s.PublicKey()}}, 0)
	require.NoError(t, err)

	rcv := newReceiver(t)
	rcv.up.Store(true)
	sinkMetrics := metrics.NewAlertSink(nil)
	runSink(t, env, alerting.SinkConfig{URL: rcv.srv.URL, Durable: "hook", Trust: ks, Metrics: sinkMetrics})

	bal := events.BalanceRef{Scope: "team:search", Period: events.PeriodMonth, Instance: "2026-12"}
	genuine := events.BlockingAlert(bal, "USD", events.MustMoney("10"), events.MustMoney("9.9"), "1", "req-1", 0, time.Now())
	forge := func(a events.Alert) {
		t.Helper()
		a.Used = events.MustMoney("10000")
		data, err := events.EncodeAlert(a)
		require.NoError(t, err)
		msg := nats.NewMsg(env.Layout.AlertMsgSubject(a))
		msg.Data = data
		msg.Header.Set(streams.HeaderAlertID, a.ID)
		_, err = env.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(a.ID))
		require.NoError(t, err)
	}
	forge(genuine)
	forge(events.BlockingAlert(events.BalanceRef{Scope: "org:ceo", Period: events.PeriodMonth, Instance: "2026-12"},
		"USD", events.MustMoney("10"), events.MustMoney("9.9"), "1", "req-2", 0, time.Now()))

	p := alerting.New(env.JS, env.Layout, alerting.WithSigner(func() *signing.Signer { return s }),
		alerting.WithTrust(func() *signing.KeySet { return ks }))
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(pctx) }()
	t.Cleanup(func() { cancel(); <-done })
	p.Blocked(genuine)
	require.Eventually(t, func() bool { return p.Published()+p.Duplicates()+p.Failed() == 1 }, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, uint64(1), p.Published(), "the genuine alert is stored")
	require.Equal(t, uint64(1), p.Forged())

	consumerDone(t, env, "hook")
	got, keys := rcv.bodies()
	require.Len(t, got, 1, "only the genuine alert is delivered")
	require.Equal(t, genuine.ID, got[0].Alert.ID)
	require.Equal(t, "9.9", got[0].Alert.Used.String())
	require.Equal(t, []string{genuine.ID}, keys)
	require.Equal(t, 2.0, testutil.ToFloat64(sinkMetrics.Failures.WithLabelValues(metrics.SinkFailForged)))

	// A second publish of the same alert (a restart folding it again)
	// finds it stored.
	p.Blocked(genuine) // remembered: not queued again
	p2 := alerting.New(env.JS, env.Layout, alerting.WithSigner(func() *signing.Signer { return s }),
		alerting.WithTrust(func() *signing.KeySet { return ks }))
	go func() { _ = p2.Run(pctx) }()
	p2.Blocked(genuine)
	require.Eventually(t, func() bool { return p2.Duplicates() == 1 }, 30*time.Second, 5*time.Millisecond)
	require.Zero(t, p2.Published())
}

// TestSink_UnknownKeyHeldUntilReload: a replica signs an alert with a key
// the sink has not been given yet (it joined with a key of its own, or
// rotated its key, before the sink was sent SIGHUP). The sink holds the
// alert: it is not delivered, not terminated but tried again (the
// consumer redelivers it, it stays pending, nothing is counted
// undelivered), and logged once as held for a key reload, not per
// attempt. A message signed with a known key whose signature does not
// verify is still dropped at once. Once the keys are reloaded (SetTrust,
// what the sink's SIGHUP calls) the held alert is delivered, exactly once.
// How we know it can fail: the sink terminated such an alert at its first
// attempt (reason forged), so the consumer never redelivered it and
// nothing pending remained (the first wait times out), and after a reload
// it was never delivered; run against that handling (Term for every
// Verify reason) this test fails at the first wait.
func TestSink_UnknownKeyHeldUntilReload(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	_, err := streams.EnsureAlerts(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	oldKey, err := signing.NewEphemeral()
	require.NoError(t, err)
	newKey, err := signing.NewEphemeral()
	require.NoError(t, err)
	before, err := signing.NewKeySet([]signing.Key{{Public: oldKey.PublicKey()}}, 0)
	require.NoError(t, err)
	after, err := signing.NewKeySet([]signing.Key{{Public: oldKey.PublicKey()}, {Public: newKey.PublicKey()}}, 0)
	require.NoError(t, err)

	rcv := newReceiver(t)
	rcv.up.Store(true)
	m := metrics.NewAlertSink(nil)
	var logs testenv.LogBuffer
	sink, err := alerting.NewSink(env.JS, env.Layout, alerting.SinkConfig{URL: rcv.srv.URL, Durable: "hook", MaxDeliver: 1000,
		Trust: before, Metrics: m, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	alerting.ShortenKeyWait(sink, 20*time.Millisecond, 100*time.Millisecond)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = sink.Run(sctx) }()
	t.Cleanup(func() { cancel(); <-done })
	consumerReady(t, env, "hook")
	consumer := func() (*jetstream.ConsumerInfo, error) {
		c, err := env.JS.Consumer(ctx, env.Layout.AlertStreamName(), "hook")
		if err != nil {
			return nil, err
		}
		return c.Info(ctx)
	}

	// The new replica's alert, signed and published as a replica does.
	bal := events.BalanceRef{Scope: "team:search", Period: events.PeriodMonth, Instance: "2026-12"}
	alert := events.BlockingAlert(bal, "USD", events.MustMoney("10"), events.MustMoney("9.9"), "1", "req-1", 0, time.Now())
	p := alerting.New(env.JS, env.Layout, alerting.WithSigner(func() *signing.Signer { return newKey }),
		alerting.WithTrust(func() *signing.KeySet { return after }))
	pctx, pcancel := context.WithCancel(ctx)
	pdone := make(chan struct{})
	go func() { defer close(pdone); _ = p.Run(pctx) }()
	t.Cleanup(func() { pcancel(); <-pdone })
	p.Blocked(alert)
	require.Eventually(t, func() bool { return p.Published() == 1 }, 30*time.Second, 5*time.Millisecond)

	// Held: delivered to the sink again and again (each attempt counted),
	// still pending on the consumer, never posted nor given up.
	require.Eventually(t, func() bool {
		ci, err := consumer()
		return err == nil && ci.Delivered.Consumer >= 4 && testutil.ToFloat64(m.Failures.WithLabelValues(metrics.SinkFailUntrustedKey)) >= 4
	}, 30*time.Second, 5*time.Millisecond, "the alert is tried again, not terminated")
	ci, err := consumer()
	require.NoError(t, err)
	require.Equal(t, 1, ci.NumAckPending, "held, not terminated")
	require.Equal(t, 1, sink.Held())
	got, _ := rcv.bodies()
	require.Empty(t, got)
	require.Zero(t, testutil.ToFloat64(m.Undelivered))
	require.Zero(t, testutil.ToFloat64(m.Failures.WithLabelValues(metrics.SinkFailForged)))
	require.Equal(t, 1, strings.Count(logs.String(), "held for a key reload"), "logged once, not per attempt:\n%s", logs.String())
	require.Contains(t, logs.String(), newKey.PublicKey())
	require.NotContains(t, logs.String(), "dropped")

	// A known key's signature that does not verify is dropped at once, as
	// before.
	bad := events.BlockingAlert(events.BalanceRef{Scope: "org:ceo", Period: events.PeriodMonth, Instance: "2026-12"},
		"USD", events.MustMoney("10"), events.MustMoney("9.9"), "1", "req-2", 0, time.Now())
	data, err := events.EncodeAlert(bad)
	require.NoError(t, err)
	msg := nats.NewMsg(env.Layout.AlertMsgSubject(bad))
	oldKey.SignMsg(msg.Header, signing.DomainAlert, msg.Subject, data)
	msg.Data = append(data[:len(data):len(data)], ' ')
	_, err = env.JS.PublishMsg(ctx, msg)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(m.Failures.WithLabelValues(metrics.SinkFailForged)) == 1
	}, 30*time.Second, 5*time.Millisecond)

	// The keys reloaded: the held alert is delivered, once.
	sink.SetTrust(after)
	consumerDone(t, env, "hook")
	got, keys := rcv.bodies()
	require.Len(t, got, 1, "the held alert is delivered once")
	require.Equal(t, alert.ID, got[0].Alert.ID)
	require.Equal(t, []string{alert.ID}, keys)
	require.Equal(t, 1.0, testutil.ToFloat64(m.Deliveries))
	require.Zero(t, testutil.ToFloat64(m.Undelivered))
	require.Zero(t, sink.Held())
}

// TestSink_TenantOnly: a sink given a tenant delivers that tenant's alerts
// and no other's (a platform's webhook per tenant), on a consumer of its
// own; a sink of every alert beside it still gets them all. A sink whose
// durable exists with another filter refuses to run instead of delivering
// alerts its webhook must not get. How it can fail: without the tenant's
// filter, acme's webhook gets globex's and the deployment's alerts too.
func TestSink_TenantOnly(t *testing.T) {
	env := testenv.New(t)
	_, err := streams.EnsureAlerts(context.Background(), env.JS, env.Layout)
	require.NoError(t, err)
	acme, all := newReceiver(t), newReceiver(t)
	acme.up.Store(true)
	all.up.Store(true)
	runSink(t, env, alerting.SinkConfig{URL: acme.srv.URL, Tenant: "acme", Durable: alerting.DefaultDurable + "-acme"})
	runSink(t, env, alerting.SinkConfig{URL: all.srv.URL, Durable: alerting.DefaultDurable})

	p := alerting.New(env.JS, env.Layout)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for _, scope := range []events.Scope{events.TenantScope("acme", "org:a"), events.TenantScope("globex", "org:g"), "org:own"} {
		bal := events.BalanceRef{Scope: scope, Period: events.PeriodDay, Instance: "2026-12-02"}
		p.Blocked(events.BlockingAlert(bal, "USD", events.MustMoney("5"), events.MustMoney("4.9"), "1", "r1", 0, time.Now()))
	}
	scopes := func(r *receiver) []string {
		got, _ := r.bodies()
		var out []string
		for _, b := range got {
			out = append(out, string(b.Alert.Balance.Scope))
		}
		return out
	}
	require.Eventually(t, func() bool { return len(scopes(all)) == 3 }, 30*time.Second, 5*time.Millisecond, "every alert reaches the sink of all")
	consumerDone(t, env, alerting.DefaultDurable)
	s, err := env.JS.Stream(context.Background(), env.Layout.AlertStreamName())
	require.NoError(t, err)
	c, err := s.Consumer(context.Background(), alerting.DefaultDurable+"-acme")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ci, err := c.Info(context.Background())
		return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0 && ci.Delivered.Consumer == 1
	}, 30*time.Second, 5*time.Millisecond, "acme's consumer took its one alert")
	require.Equal(t, []string{"acme/org:a"}, scopes(acme), "acme's webhook: acme's alert only")

	// globex's sink on acme's durable: refused, nothing delivered.
	other, err := alerting.NewSink(env.JS, env.Layout, alerting.SinkConfig{URL: all.srv.URL, Tenant: "globex", Durable: alerting.DefaultDurable + "-acme"})
	require.NoError(t, err)
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	require.ErrorIs(t, other.Run(rctx), alerting.ErrConsumerFilter)
	_, err = alerting.NewSink(env.JS, env.Layout, alerting.SinkConfig{URL: all.srv.URL, Tenant: "Not A Tenant"})
	require.Error(t, err)
}

// TestSink_TenantOnlyNotAnUntenantedTScope: the untenanted budget t:acme
// has its alerts on "spendgate.alert.v1.t.acme.<period>...", which the
// tenant's filter "spendgate.alert.v1.t.acme.>" matches too. How it can
// fail: acme's webhook gets the deployment's alerts of t:acme (a budget
// acme has nothing to do with).
func TestSink_TenantOnlyNotAnUntenantedTScope(t *testing.T) {
	env := testenv.New(t)
	_, err := streams.EnsureAlerts(context.Background(), env.JS, env.Layout)
	require.NoError(t, err)
	acme := newReceiver(t)
	acme.up.Store(true)
	runSink(t, env, alerting.SinkConfig{URL: acme.srv.URL, Tenant: "acme", Durable: alerting.DefaultDurable + "-acme"})

	p := alerting.New(env.JS, env.Layout)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for _, scope := range []events.Scope{"t:acme", events.TenantScope("acme", "org:a")} {
		bal := events.BalanceRef{Scope: scope, Period: events.PeriodDay, Instance: "2026-12-02"}
		p.Blocked(events.BlockingAlert(bal, "USD", events.MustMoney("5"), events.MustMoney("4.9"), "1", "r1", 0, time.Now()))
	}
	s, err := env.JS.Stream(context.Background(), env.Layout.AlertStreamName())
	require.NoError(t, err)
	c, err := s.Consumer(context.Background(), alerting.DefaultDurable+"-acme")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ci, err := c.Info(context.Background())
		return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0 && ci.Delivered.Consumer == 2
	}, 30*time.Second, 5*time.Millisecond, "acme's consumer took both alerts its filter matches")
	got, _ := acme.bodies()
	var scopes []string
	for _, b := range got {
		scopes = append(scopes, string(b.Alert.Balance.Scope))
	}
	require.Equal(t, []string{"acme/org:a"}, scopes, "acme's webhook: acme's alert only, not the untenanted t:acme's")
}
