package gateway_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/gateway"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/testenv"
)

// startStream posts a streaming chat call and returns its response once
// its first event has come, the rest of its body unread.
func (e *env) startStream(secret, prompt string) (*http.Response, *bufio.Reader) {
	e.t.Helper()
	resp := e.post("/v1/chat/completions", secret, `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"`+prompt+`"}],"max_tokens":200}`)
	require.Equal(e.t, http.StatusOK, resp.StatusCode)
	br := bufio.NewReader(resp.Body)
	_, err := br.ReadString('\n')
	require.NoError(e.t, err)
	return resp, br
}

// notes maps each reservation the export has to its settle's note.
func (e *env) notes() map[string]string {
	e.t.Helper()
	notes := map[string]string{}
	_, err := report.NewReader(e.te.JS, e.te.Layout, projector.New(e.te.JS, e.te.Layout)).Rows(ctxT(e.t), report.Filter{}, func(r *report.Row) error {
		notes[r.ReservationID] = r.Note
		return nil
	})
	require.NoError(e.t, err)
	return notes
}

// TestGateway_DrainLetsCallsFinish: once Drain begins, a new call is
// refused 503 gateway_draining (retryable: never sent), while a stream in
// flight runs to its end, settled from its usage; Drain returns when it
// has ended. Without Drain's count of calls there is nothing to wait on,
// and the listener's fixed 5 s shutdown cut such streams.
func TestGateway_DrainLetsCallsFinish(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:drain")
	resp, br := e.startStream(secret, "fake:slow=50ms fake:out=20")
	drained := make(chan struct{})
	go func() { e.gw.Drain(context.Background()); close(drained) }()
	testenv.WaitFor(t, 10*time.Second, "new calls refused", func() bool {
		r := e.post("/v1/chat/completions", secret, `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`)
		body := readAll(t, r)
		if r.StatusCode != http.StatusServiceUnavailable {
			return false
		}
		require.Equal(t, "gateway_draining", r.Header.Get("X-Spendgate-Error-Code"), body)
		require.Empty(t, r.Header.Get("X-Should-Retry"), "never sent: the SDK may retry elsewhere")
		require.Equal(t, "1", r.Header.Get("Retry-After"))
		return true
	})
	select {
	case <-drained:
		t.Fatal("Drain returned with a stream in flight")
	default:
	}
	rest := new(strings.Builder)
	_, err := br.WriteTo(rest)
	require.NoError(t, err)
	resp.Body.Close()
	require.True(t, strings.HasSuffix(rest.String(), "data: [DONE]\n\n"), rest.String())
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("Drain did not return once the stream ended")
	}
	calls := e.fake.Calls()
	require.NotNil(t, calls[0].Usage)
	requireMoney(t, cost(*calls[0].Usage), e.budget("team:drain").Spent, "settled from its usage")
}

// TestGateway_DrainCutsAtItsTimeout: a stream still running when Drain's
// context ends is cut: it ends in the provider's error event
// gateway_shutdown, is charged its reservation with the note
// reservation_gateway_shutdown, and its log line says gateway_shutdown,
// never caller_gone; Drain returns once it is closed. Before, the
// listener's shutdown closed the connection, and the call was settled
// reservation_caller_gone, as if its caller had left.
func TestGateway_DrainCutsAtItsTimeout(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:cut-at-shutdown")
	resp, br := e.startStream(secret, "fake:slow=100ms fake:out=500")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	drained := make(chan struct{})
	go func() { e.gw.Drain(ctx); close(drained) }()
	rest := new(strings.Builder)
	_, err := br.WriteTo(rest)
	require.NoError(t, err, "the stream ends cleanly, in its error event")
	resp.Body.Close()
	requireStreamError(t, "/v1/chat/completions", rest.String(), gateway.CodeGatewayShutdown)
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("Drain did not return")
	}
	b := e.budget("team:cut-at-shutdown")
	require.Zero(t, b.Open)
	requireMoney(t, reserved(t, resp), b.Spent)
	require.Equal(t, gateway.NoteGatewayShutdown, e.notes()[resp.Header.Get("X-Spendgate-Reservation-Id")])
	logs := e.logs.String()
	require.Contains(t, logs, "outcome=gateway_shutdown")
	require.NotContains(t, logs, "outcome=caller_gone")
}
