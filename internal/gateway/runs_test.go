package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gateway"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// lastSeq is the ledger stream's last sequence: what a refused call must
// leave as it was.
func (e *env) lastSeq() uint64 {
	e.t.Helper()
	s, err := e.te.JS.Stream(ctxT(e.t), e.te.Layout.StreamName())
	require.NoError(e.t, err)
	info, err := s.Info(ctxT(e.t))
	require.NoError(e.t, err)
	return info.State.LastSeq
}

// putBudgets puts each budget through cl (the deployment's admin, or a
// tenant's client).
func (e *env) putBudgets(cl *client.Client, puts ...events.BudgetPutRequest) {
	e.t.Helper()
	for _, b := range puts {
		_, err := cl.PutBudget(ctxT(e.t), b)
		require.NoError(e.t, err, "%s", b.Scope)
	}
}

// runKey makes a key of scopes with end-user kind endUser and run kind
// run (either may be ""), in tenant ("" for the deployment's); it returns
// the key's id and secret.
func (e *env) runKey(tenant string, scopes []string, endUser, run string) (string, string) {
	e.t.Helper()
	id, secret, err := events.NewAPIKey()
	require.NoError(e.t, err)
	var created events.APIKeyPutReply
	e.request(streams.EndpointAPIKeyCreate, events.APIKeyCreateRequest{ID: id, Hash: events.HashAPIKey(secret), Tenant: tenant,
		Scopes: scopes, EndUser: endUser, Run: run}, &created)
	require.Equal(e.t, run, created.Run)
	return id, secret
}

// errorBody is an answer's error in OpenAI's shape, with the ledger's
// denial.
type errorBody struct {
	Error struct {
		Type, Code, Message string
		Spendgate           *struct {
			Scope  string
			Reason string
		}
	}
}

func decodeError(t *testing.T, body string) errorBody {
	t.Helper()
	var b errorBody
	require.NoError(t, json.Unmarshal([]byte(body), &b), body)
	return b
}

// TestGateway_Runs: a key with a run kind admits each call against
// "run:<run>", the run named in X-Spendgate-Run, as well as its own scopes
// and its end user's, and the admit's metadata names the run. The runs'
// budgets come from a run:* default of one request for the run's
// lifetime: a run's second call is denied with the run's budget as the
// blocking scope while the end user's budget has room, and another run is
// admitted. A call naming no run, or a run no scope can hold, is refused
// 400 run_required or invalid_run, in either API's shape, before anything
// reaches the ledger or the upstream. Clearing the key's run kind (keys
// update --run none) lets its calls through without the header, and
// against no run's budget. How it can fail: a gateway that ignores the
// key's run kind admits the run's second call (no run budget in the
// admit) and charges no run; one that checks the header after the admit
// writes a reservation for the refused calls.
func TestGateway_Runs(t *testing.T) {
	e := newEnv(t, envOpts{keyCache: 50 * time.Millisecond})
	e.putBudgets(e.admin,
		events.BudgetPutRequest{Scope: "team:chat", Period: "month", Limit: "10", Unit: "USD"},
		events.BudgetPutRequest{Scope: "user:alice", Period: "month", Limit: "10", Unit: "USD"},
		events.BudgetPutRequest{Scope: "run:*", Period: "lifetime", Limit: "1", Unit: "requests"})
	id, secret := e.runKey("", []string{"team:chat"}, "user", "run")
	chat := `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":20,"user":"alice"}`

	resp := e.post("/v1/chat/completions", secret, chat, gateway.HeaderRun, "r1")
	body := readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	first := resp.Header.Get("X-Spendgate-Reservation-Id")
	testenv.WaitFor(t, 10*time.Second, "the first call is settled", func() bool { return e.budget("team:chat").Open == 0 })
	r1, err := e.admin.GetBudget(ctxT(t), events.BudgetGetRequest{Scope: "run:r1", Period: "lifetime"})
	require.NoError(t, err, "the run's budget, made from run:* by the call's admit")
	require.Equal(t, "1", r1.Spent)
	require.Equal(t, "requests", r1.Unit)

	// The run's second call: its one request is spent. Alice's budget
	// holds it; the run's does not.
	resp = e.post("/v1/chat/completions", secret, chat, gateway.HeaderRun, "r1")
	body = readAll(t, resp)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, body)
	denied := decodeError(t, body)
	require.Equal(t, "limit_reached", denied.Error.Code)
	require.NotNil(t, denied.Error.Spendgate, body)
	require.Equal(t, "run:r1", denied.Error.Spendgate.Scope, "the run's budget blocks the call")
	alice := e.budget("user:alice")
	require.Equal(t, "0", alice.Reserved)
	require.NotEqual(t, "0", alice.Spent, "alice's budget holds her first call")
	avail, err := events.ParseMoney(alice.Available)
	require.NoError(t, err)
	require.Positive(t, avail.Cmp(events.MustMoney("0.01")), "alice's budget has room: %s", alice.Available)
	require.Len(t, e.fake.Calls(), 1, "the denied call never reached the upstream")

	// Another run of the same end user gets a budget of its own.
	resp = e.post("/v1/chat/completions", secret, chat, gateway.HeaderRun, "r2")
	body = readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	second := resp.Header.Get("X-Spendgate-Reservation-Id")
	testenv.WaitFor(t, 10*time.Second, "the second run's call is settled", func() bool { return e.budget("team:chat").Open == 0 })

	// The refusals: no run, a run no scope can hold (a space, 129
	// characters), in OpenAI's shape and Anthropic's. Nothing is written.
	seq := e.lastSeq()
	long := make([]byte, 129)
	for i := range long {
		long[i] = 'r'
	}
	msgs := `{"model":"claude-x","max_tokens":20,"metadata":{"user_id":"alice"},"messages":[{"role":"user","content":"hi"}]}`
	for _, c := range []struct {
		path, body, code string
		hdr              []string
	}{
		{"/v1/chat/completions", chat, "run_required", nil},
		{"/v1/chat/completions", chat, "invalid_run", []string{gateway.HeaderRun, "r 1"}},
		{"/v1/chat/completions", chat, "invalid_run", []string{gateway.HeaderRun, string(long)}},
		{"/v1/messages", msgs, "run_required", nil},
		{"/v1/messages", msgs, "invalid_run", []string{gateway.HeaderRun, "run:r1"}},
	} {
		resp := e.post(c.path, secret, c.body, c.hdr...)
		body := readAll(t, resp)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s %v: %s", c.path, c.hdr, body)
		require.Equal(t, c.code, resp.Header.Get(gateway.HeaderErrorCode), body)
		require.Equal(t, "false", resp.Header.Get("X-Should-Retry"), "no retry mends it")
		require.Empty(t, resp.Header.Get("X-Spendgate-Reservation-Id"))
		if c.path == "/v1/messages" {
			var shape struct {
				Type  string
				Error struct{ Type, Message, Code string }
			}
			require.NoError(t, json.Unmarshal([]byte(body), &shape), body)
			require.Equal(t, "error", shape.Type)
			require.Equal(t, "invalid_request_error", shape.Error.Type)
			require.Equal(t, c.code, shape.Error.Code)
		} else {
			b := decodeError(t, body)
			require.Equal(t, c.code, b.Error.Code)
			require.Equal(t, "invalid_request_error", b.Error.Type)
			require.Nil(t, b.Error.Spendgate)
		}
		if c.code == "run_required" {
			require.Contains(t, body, "key "+id)
			require.Contains(t, body, gateway.HeaderRun)
		}
	}
	require.Equal(t, seq, e.lastSeq(), "the refused calls wrote nothing to the ledger")
	require.Len(t, e.fake.Calls(), 2, "nor reached the upstream")

	// The admits' scopes and metadata, as the ledger recorded them.
	rows := map[string]*report.Row{}
	_, err = report.NewReader(e.te.JS, e.te.Layout, projector.New(e.te.JS, e.te.Layout)).Rows(ctxT(t), report.Filter{}, func(r *report.Row) error {
		rows[r.ReservationID] = r
		return nil
	})
	require.NoError(t, err)
	require.Len(t, rows, 2, "the two admitted calls, nothing of the refused ones")
	for rid, run := range map[string]string{first: "r1", second: "r2"} {
		r := rows[rid]
		require.NotNil(t, r, rid)
		require.ElementsMatch(t, []events.Scope{"team:chat", "user:alice", events.Scope("run:" + run)}, r.Scopes)
		require.Equal(t, run, r.Metadata["run"])
		require.Equal(t, "alice", r.Metadata["end_user"])
		require.Equal(t, id, r.Metadata["key_id"])
	}

	// keys update --run none: the key's calls name no run, and the spent
	// run's header is ignored.
	e.request(streams.EndpointAPIKeyUpdate, json.RawMessage(`{"id":"`+id+`","run":""}`), nil)
	testenv.WaitFor(t, 5*time.Second, "the gateway sees the key without a run kind", func() bool {
		resp := e.post("/v1/chat/completions", secret, chat)
		body := readAll(t, resp)
		if resp.StatusCode == http.StatusOK {
			return true
		}
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
		require.Equal(t, "run_required", code(t, body), "refused only while the cache holds the run kind")
		return false
	})
	resp = e.post("/v1/chat/completions", secret, chat, gateway.HeaderRun, "r1")
	body = readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, "run r1's spent budget no longer binds the key: %s", body)
	third := resp.Header.Get("X-Spendgate-Reservation-Id")
	testenv.WaitFor(t, 10*time.Second, "every call is settled", func() bool { return e.budget("team:chat").Open == 0 })
	_, err = report.NewReader(e.te.JS, e.te.Layout, projector.New(e.te.JS, e.te.Layout)).Rows(ctxT(t), report.Filter{}, func(r *report.Row) error {
		rows[r.ReservationID] = r
		return nil
	})
	require.NoError(t, err)
	require.ElementsMatch(t, []events.Scope{"team:chat", "user:alice"}, rows[third].Scopes)
	_, named := rows[third].Metadata["run"]
	require.False(t, named, "no run in the metadata: %v", rows[third].Metadata)
	r1, err = e.admin.GetBudget(ctxT(t), events.BudgetGetRequest{Scope: "run:r1", Period: "lifetime"})
	require.NoError(t, err)
	require.Equal(t, "1", r1.Spent, "the run's budget was not charged again")
}

// TestGateway_RunsOfATenant: a tenant's key with a run kind admits its
// calls against the tenant's run scope, never the deployment's scope of
// the same name. How it can fail: a run scope admitted on the
// deployment's subject would be denied by the deployment's spent run:r1
// (and would charge it). GET /v1/key with the run names the tenant's
// budget.
func TestGateway_RunsOfATenant(t *testing.T) {
	e := newEnv(t, envOpts{})
	acme, err := client.New(e.te.Connect(t), client.WithPrefix(streams.DefaultPrefix+"t.acme."))
	require.NoError(t, err)
	e.putBudgets(acme,
		events.BudgetPutRequest{Scope: "team:chat", Period: "month", Limit: "10", Unit: "USD"},
		events.BudgetPutRequest{Scope: "run:r1", Period: "lifetime", Limit: "5", Unit: "requests"})
	// The deployment's own run:r1 is spent: it must not bind acme's calls.
	_, err = e.admin.PutBudget(ctxT(t), events.BudgetPutRequest{Scope: "run:r1", Period: "lifetime", Limit: "0", Unit: "requests", AllowZero: true})
	require.NoError(t, err)
	_, secret := e.runKey("acme", []string{"team:chat"}, "", "run")

	resp := e.post("/v1/chat/completions", secret, `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":20}`, gateway.HeaderRun, "r1")
	body := readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	testenv.WaitFor(t, 10*time.Second, "the call is settled", func() bool {
		v, err := acme.GetBudget(ctxT(t), events.BudgetGetRequest{Scope: "run:r1", Period: "lifetime"})
		require.NoError(t, err)
		return v.Open == 0 && v.Spent == "1"
	})
	mine, err := e.admin.GetBudget(ctxT(t), events.BudgetGetRequest{Scope: "run:r1", Period: "lifetime"})
	require.NoError(t, err)
	require.Equal(t, "0", mine.Spent, "the deployment's run:r1 is not the tenant's")
	require.Equal(t, "0", mine.Reserved)

	// GET /v1/key with the run names the tenant's budget.
	status, info, body := keyInfo(t, e.url, secret, gateway.HeaderRun, "r1")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "acme", info.Tenant)
	require.Equal(t, "run:r1", info.RunScope)
	require.Len(t, info.Budgets, 2)
	require.Equal(t, "5", info.Budgets[1].Limit, "the tenant's run:r1, not the deployment's (limit 0)")
	require.Equal(t, "1", info.Budgets[1].Spent)
}
