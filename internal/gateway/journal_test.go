package gateway_test

import (
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/internal/gateway"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestJournal_CloseDueAtShutdownLandsOnNextStart: a call whose settle met
// a ledger outage, still failing when the gateway stops (Wait's last
// attempt), stays in the journal with the close it is due: its usage. A
// gateway started on the same journal once the ledger is back settles it
// from that usage (not at the whole reservation), and the journal is then
// empty. How we know it can fail: without the journal the reservation
// stays open after the stop, and spent stays 0.
func TestJournal_CloseDueAtShutdownLandsOnNextStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.journal")
	arrived, proceed := make(chan struct{}, 1), make(chan struct{})
	e := newEnv(t, envOpts{upstream: holdUpstream(arrived, proceed), journal: path})
	secret := e.key("10", "team:j")
	resps := outageAtSettle(t, e, arrived, proceed, secret, `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":50}`, 1)
	require.Equal(t, http.StatusOK, resps[0].StatusCode, readAll(t, resps[0]))
	e.gw.Wait() // the last attempt meets the outage too
	require.NoError(t, e.gw.Close())
	journal, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(journal), `"how":"usage"`)

	e.start()
	require.Equal(t, int64(1), e.budget("team:j").Open, "the call's reservation is still open")
	cs, err := gateway.NewClientSet(e.te.Connect(t), streams.DefaultPrefix, client.WithTimeout(time.Second), client.WithRetries(2))
	require.NoError(t, err)
	root, err := cs.For("")
	require.NoError(t, err)
	g, err := gateway.New(cs, gateway.NewKeys(root, time.Second), gateway.Config{Upstreams: []gateway.Upstream{{Kind: gateway.KindOpenAI, BaseURL: "http://127.0.0.1:1/v1", Key: upstreamKey}}},
		gateway.WithJournal(path))
	require.NoError(t, err)
	closed, left := g.RecoverJournal(ctxT(t))
	require.Equal(t, 1, closed)
	require.Zero(t, left)
	b := e.budget("team:j")
	require.Zero(t, b.Open)
	calls := e.fake.Calls()
	require.Len(t, calls, 1)
	requireMoney(t, cost(*calls[0].Usage), b.Spent, "settled from the call's usage")
	require.NoError(t, g.Close())

	g, err = gateway.New(cs, gateway.NewKeys(root, time.Second), gateway.Config{Upstreams: []gateway.Upstream{{Kind: gateway.KindOpenAI, BaseURL: "http://127.0.0.1:1/v1", Key: upstreamKey}}},
		gateway.WithJournal(path))
	require.NoError(t, err)
	closed, left = g.RecoverJournal(ctxT(t))
	require.Zero(t, closed+left, "nothing is left open")
	require.NoError(t, g.Close())

	// A run killed after a close landed and before it wrote so leaves
	// the call open in its journal: the next start finds it closed
	// already, and records it so, without an error.
	id := resps[0].Header.Get("X-Spendgate-Reservation-Id")
	require.NotEmpty(t, id)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	_, err = f.WriteString(`{"open":{"reservation_id":"` + id + `","amount":"1","unit":"USD","expires_at":"2030-01-01T00:00:00Z"}}` + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	var logs testenv.LogBuffer
	g, err = gateway.New(cs, gateway.NewKeys(root, time.Second), gateway.Config{Upstreams: []gateway.Upstream{{Kind: gateway.KindOpenAI, BaseURL: "http://127.0.0.1:1/v1", Key: upstreamKey}}},
		gateway.WithJournal(path), gateway.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	closed, left = g.RecoverJournal(ctxT(t))
	require.Equal(t, 1, closed)
	require.Zero(t, left)
	require.Contains(t, logs.String(), "was closed already")
	require.NotContains(t, logs.String(), "level=ERROR")
	requireMoney(t, cost(*calls[0].Usage), e.budget("team:j").Spent, "nothing settled twice")
	require.NoError(t, g.Close())
}

// TestJournal_FileRules: a journal is one gateway's (a second gateway on
// the same file is refused while the first holds it); a last line cut
// short (the process died writing it) is ignored; a file that is not a
// journal (a bad line, another program's JSON lines, a one-line config)
// is refused and left as it was, never taken for an empty journal and
// rewritten.
func TestJournal_FileRules(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.journal")
	cfg := gateway.Config{Upstreams: []gateway.Upstream{{Kind: gateway.KindOpenAI, BaseURL: "http://127.0.0.1:1/v1", Key: upstreamKey}}}
	cs, err := gateway.NewClientSet(testenv.New(t).Connect(t), streams.DefaultPrefix)
	require.NoError(t, err)
	root, err := cs.For("")
	require.NoError(t, err)
	newGW := func() (*gateway.Gateway, error) {
		return gateway.New(cs, gateway.NewKeys(root, time.Second), cfg, gateway.WithJournal(path))
	}
	g, err := newGW()
	require.NoError(t, err)
	_, err = newGW()
	require.ErrorContains(t, err, "in use by another gateway")
	require.NoError(t, g.Close())

	open := `{"open":{"reservation_id":"rsv_1","amount":"0.5","unit":"USD","expires_at":"2026-12-04T00:00:00Z"}}` + "\n"
	require.NoError(t, os.WriteFile(path, []byte(open+`{"done":"rsv_`), 0o600))
	g, err = newGW()
	require.NoError(t, err, "a last line cut short is ignored")
	require.NoError(t, g.Close())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(data), "\n"), "rewritten with the open call alone: %s", data)
	require.Contains(t, string(data), `"rsv_1"`)

	for _, other := range []string{"not a journal\n" + open, `{"level":"info","msg":"a log line"}` + "\n", "key = value"} {
		require.NoError(t, os.WriteFile(path, []byte(other), 0o600))
		_, err = newGW()
		require.ErrorContains(t, err, "is not a journal record", "%q", other)
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, other, string(data), "a file that is not a journal is left as it was")
	}
}
