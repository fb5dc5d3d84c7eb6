package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gateway"
	"github.com/spendgate/spendgate/testenv"
)

// holdUpstream holds every call at the upstream: it tells arrived, then
// waits until proceed is closed.
func holdUpstream(arrived chan<- struct{}, proceed <-chan struct{}) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived <- struct{}{}
			<-proceed
			next.ServeHTTP(w, r)
		})
	}
}

// outageAtSettle sends n calls of body, holds them at the upstream, stops
// the replica while they are there, and returns their answers: each call's
// settle meets a ledger that does not answer.
func outageAtSettle(t *testing.T, e *env, arrived <-chan struct{}, proceed chan struct{}, secret, body string, n int) []*http.Response {
	t.Helper()
	resps := make(chan *http.Response, n)
	for range n {
		go func() { resps <- e.post("/v1/chat/completions", secret, body) }()
	}
	for range n {
		select {
		case <-arrived:
		case <-time.After(30 * time.Second):
			t.Fatal("the calls did not reach the upstream")
		}
	}
	e.stop()
	close(proceed)
	var out []*http.Response
	for range n {
		select {
		case r := <-resps:
			out = append(out, r)
		case <-time.After(30 * time.Second):
			t.Fatal("a call's answer waited for its settle")
		}
	}
	return out
}

// TestGateway_SettleRetriedAfterOutage: a call whose settle meets a ledger
// that does not answer still gets its answer at once (the replica is down
// until after the test has read it), and its settle is retried in the
// background until it lands: once a replica answers again, the budget's
// spent is exactly the call's usage priced, nothing reserved. The failure
// is counted under its real code, ledger_unavailable, and the landing is
// logged with the actual amount. How it can fail: without the retry the
// reservation stays open until its TTL (11 minutes) and spent stays 0,
// so the bounded wait below fails.
func TestGateway_SettleRetriedAfterOutage(t *testing.T) {
	arrived, proceed := make(chan struct{}, 1), make(chan struct{})
	e := newEnv(t, envOpts{upstream: holdUpstream(arrived, proceed)})
	secret := e.key("10", "team:r")
	resps := outageAtSettle(t, e, arrived, proceed, secret, `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":50}`, 1)
	resp := resps[0]
	body := readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `"chat.completion"`)
	require.Equal(t, 1.0, testutil.ToFloat64(e.metrics.SettleFailures.WithLabelValues(string(events.CodeLedgerUnavailable))))
	require.Zero(t, testutil.ToFloat64(e.metrics.SettleFailures.WithLabelValues(string(events.CodeInternal))),
		"an outage is labelled by its code, not internal")
	require.Equal(t, 1.0, testutil.ToFloat64(e.metrics.SettlesPending))

	e.start()
	calls := e.fake.Calls()
	require.Len(t, calls, 1)
	want := cost(*calls[0].Usage)
	testenv.WaitFor(t, 30*time.Second, "the retried settle lands", func() bool {
		return e.budget("team:r").Open == 0
	})
	b := e.budget("team:r")
	requireMoney(t, want, b.Spent)
	require.Equal(t, "0", b.Reserved)
	testenv.WaitFor(t, 5*time.Second, "the retry is counted", func() bool {
		return testutil.ToFloat64(e.metrics.SettleRetries.WithLabelValues(gateway.RetryLanded)) == 1
	})
	// The retry's goroutine counts the landing, then leaves the pending
	// gauge as it returns.
	testenv.WaitFor(t, 5*time.Second, "no settle pending", func() bool {
		return testutil.ToFloat64(e.metrics.SettlesPending) == 0
	})
	logs := e.logs.String()
	require.Contains(t, logs, "retrying in the background")
	require.Contains(t, logs, "landed on a retry")
	require.Contains(t, logs, "actual="+b.Spent, logs)
}

// TestGateway_WaitDrainsPendingSettles: with retries waiting an hour and
// room for one, of two calls whose settle met an outage one is retried and
// one dropped (counted, and logged with what it would have recorded);
// Wait, at shutdown, makes the waiting one attempt at once, so it lands.
// How it can fail: a Wait that did not wake the retry would leave it
// waiting its hour (Wait gives up after 30 s) and spent at 0; a cap not
// enforced would settle both.
func TestGateway_WaitDrainsPendingSettles(t *testing.T) {
	arrived, proceed := make(chan struct{}, 2), make(chan struct{})
	e := newEnv(t, envOpts{upstream: holdUpstream(arrived, proceed)})
	gateway.SetRetry(e.gw, time.Hour, time.Hour, 1)
	secret := e.key("10", "team:w")
	for _, resp := range outageAtSettle(t, e, arrived, proceed, secret, `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":50}`, 2) {
		require.Equal(t, http.StatusOK, resp.StatusCode, readAll(t, resp))
	}
	require.Equal(t, 1.0, testutil.ToFloat64(e.metrics.SettleRetries.WithLabelValues(gateway.RetryDropped)))
	require.Equal(t, 1.0, testutil.ToFloat64(e.metrics.SettlesPending))
	require.Contains(t, e.logs.String(), "too many are waiting for a retry")

	e.start()
	done := make(chan struct{})
	go func() { e.gw.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Wait did not drain the pending settle")
	}
	require.Equal(t, 1.0, testutil.ToFloat64(e.metrics.SettleRetries.WithLabelValues(gateway.RetryLanded)))
	calls := e.fake.Calls()
	require.Len(t, calls, 2)
	b := e.budget("team:w")
	requireMoney(t, cost(*calls[0].Usage), b.Spent, "one call's spend: the retried one")
	require.Equal(t, int64(1), b.Open, "the dropped one waits for the sweeper")
	require.True(t, strings.Contains(e.logs.String(), "landed on a retry"))
}
