package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// e2eRequest sends req as JSON to subject and decodes the reply into out.
// It returns the error reply, if any.
func e2eRequest(t *testing.T, nc *nats.Conn, subject string, req, out any) *events.Error {
	t.Helper()
	data, err := json.Marshal(req)
	require.NoError(t, err)
	msg, err := nc.Request(subject, data, 10*time.Second)
	require.NoError(t, err, subject)
	var er events.ErrorReply
	require.NoError(t, json.Unmarshal(msg.Data, &er), string(msg.Data))
	if er.Error != nil {
		return er.Error
	}
	if out != nil {
		require.NoError(t, json.Unmarshal(msg.Data, out), string(msg.Data))
	}
	return nil
}

// e2eBurst fires n admits of amount against scope at once (released
// together by a barrier) and returns the replies.
func e2eBurst(t *testing.T, nc *nats.Conn, n int, scope, amount, idPrefix string) []events.AdmitReply {
	t.Helper()
	replies := make([]events.AdmitReply, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data, err := json.Marshal(events.AdmitRequest{
				RequestID: fmt.Sprintf("%s-%d", idPrefix, i), Scopes: []string{scope}, Amount: amount, TTL: "10m",
			})
			if err != nil {
				errs[i] = err
				return
			}
			<-start
			msg, err := nc.Request(streams.DefaultPrefix+streams.EndpointAdmit, data, 30*time.Second)
			if err != nil {
				errs[i] = err
				return
			}
			var er events.ErrorReply
			if json.Unmarshal(msg.Data, &er) == nil && er.Error != nil {
				errs[i] = er.Error
				return
			}
			errs[i] = json.Unmarshal(msg.Data, &replies[i])
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "admit %d", i)
	}
	return replies
}

// e2eAdmitsServed asks every spendgate instance for its micro stats and
// returns, per instance id, how many requests its admit endpoint has taken.
func e2eAdmitsServed(t *testing.T, nc *nats.Conn, instances int) map[string]int {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, nc.PublishRequest("$SRV.STATS."+streams.ServiceName, inbox, nil))
	out := map[string]int{}
	for len(out) < instances {
		msg, err := sub.NextMsg(5 * time.Second)
		require.NoError(t, err, "waiting for stats of %d instances, have %d", instances, len(out))
		var st micro.Stats
		require.NoError(t, json.Unmarshal(msg.Data, &st), string(msg.Data))
		require.Equal(t, micro.StatsResponseType, st.Type)
		out[st.ID] = 0
		for _, ep := range st.Endpoints {
			if ep.Subject == streams.DefaultPrefix+streams.EndpointAdmit {
				out[st.ID] = ep.NumRequests
			}
		}
	}
	return out
}

// TestServe_TwoProcessesHotBudget: 200 concurrent admits of 0.05 against a
// 1.00 budget, served by two separate `spendgate serve` processes on one
// NATS server, admit exactly 20, and the invariant checker passes.
//
// The two processes share nothing but NATS: each folds the ledger stream
// into its own memory and decides admits against what it has folded, so
// each may decide against a balance the other has just changed. Only the
// compare-and-set on the KV revision (Nats-Expected-Last-Subject-Sequence
// on every balance write) keeps them from both admitting into the same
// room: the loser's write is rejected, it folds the winner's revision and
// decides again. How we know this test would catch its removal: the
// in-process negative control TestAdmit_BlindWritesOverAdmit (package
// service) runs the same burst on two replicas with the revision check
// switched off (ledger.UnsafeBlindWritesForTesting) and over-admits,
// breaks the invariant checker, or stops a replica on the fork it wrote
// (lane.v2 chains) within a few rounds.
func TestServe_TwoProcessesHotBudget(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	// One data dir: both sign with its key, which the ledger trusts.
	dir := t.TempDir()
	for i := 0; i < 2; i++ {
		startProc(t, true, "serve", "--nats-url", env.URL(), "--replicas", "1", "--sweep-interval", "1m", "--data-dir", dir)
	}
	nc := connect(t, env.URL())
	testenv.WaitFor(t, 15*time.Second, "two spendgate instances", func() bool { return serviceCount(t, nc) == 2 })

	put := func(scope string) {
		var v events.BudgetView
		e := e2eRequest(t, nc, streams.DefaultPrefix+streams.EndpointBudgetPut,
			events.BudgetPutRequest{Scope: scope, Period: "month", Limit: "1.00", Unit: "USD"}, &v)
		require.Nil(t, e)
		require.Equal(t, "1", v.Limit)
	}
	put("org:acme")
	rs := e2eBurst(t, nc, 200, "org:acme", "0.05", "hot")
	admitted, denied := 0, map[events.Code]int{}
	ids := map[string]bool{}
	for _, r := range rs {
		if r.Admitted {
			admitted++
			ids[r.ReservationID] = true
			continue
		}
		require.NotNil(t, r.Denial)
		denied[r.Denial.Reason]++
	}
	require.Equal(t, 20, admitted)
	require.Len(t, ids, 20, "every admission has its own reservation")
	require.Equal(t, map[events.Code]int{events.ReasonLimitReached: 180}, denied)

	// Both processes must have served admits, or the burst proved nothing
	// about two writers. The queue group spreads requests at random; if one
	// process got them all, send more bursts (against fresh budgets) until
	// both have served, a bounded number of times.
	served := e2eAdmitsServed(t, nc, 2)
	for round := 0; round < 10; round++ {
		both := len(served) == 2
		for _, n := range served {
			both = both && n > 0
		}
		if both {
			break
		}
		scope := fmt.Sprintf("org:spread%d", round)
		put(scope)
		e2eBurst(t, nc, 50, scope, "0.05", scope)
		served = e2eAdmitsServed(t, nc, 2)
	}
	require.Len(t, served, 2)
	for id, n := range served {
		require.Positive(t, n, "instance %s served no admit: %v", id, served)
	}
	t.Logf("admits served per process: %v", served)

	// A budget read lands on either process and reflects what that process
	// has folded, so wait (bounded) for both writers' reservations.
	testenv.WaitFor(t, 10*time.Second, "org:acme fully reserved", func() bool {
		var v events.BudgetView
		e := e2eRequest(t, nc, streams.DefaultPrefix+streams.EndpointBudgetGet,
			events.BudgetGetRequest{Scope: "org:acme", Period: "month"}, &v)
		require.Nil(t, e)
		return v.Reserved == "1" && v.Open == 20 && v.Available == "0"
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := projector.Check(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	require.True(t, rep.OK(), "invariant check: %s", rep)
}

// e2eCLI runs the spendgate binary as a client, as a user would from a
// shell with SPENDGATE_NATS_URL exported, and returns its exit code and
// standard output.
func e2eCLI(t *testing.T, url string, args ...string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, clientBin(args...), args...)
	// A race-enabled binary sleeps a second at exit while other threads
	// run (GORACE atexit_sleep_ms); a CLI run does not need that grace.
	cmd.Env = append(os.Environ(), "SPENDGATE_NATS_URL="+url, "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	case err != nil:
		t.Fatalf("spendgate %v: %v\n%s", args, err, stderr.String())
	}
	t.Logf("$ spendgate %v  -> exit %d\n%s%s", args, code, stdout.String(), stderr.String())
	return code, stdout.Bytes()
}

// e2eJSON decodes a CLI's standard output.
func e2eJSON[T any](t *testing.T, out []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(out, &v), string(out))
	return v
}

// TestCLI_Walkthrough runs the commands a README shows, against an
// embedded server, checking exit codes and replies; then restarts the
// server on the same data dir and checks the balances survived.
func TestCLI_Walkthrough(t *testing.T) {
	t.Parallel() // serve reads SPENDGATE_NATS_URL too: TestMain unsets it, so it embeds a server.
	dataDir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	url := "nats://" + listen
	serveArgs := []string{"serve", "--data-dir", dataDir, "--listen", listen}
	p := startProc(t, true, serveArgs...)
	cli := func(args ...string) (int, []byte) { t.Helper(); return e2eCLI(t, url, args...) }

	// Budgets.
	code, out := cli("budget", "put", "--scope", "org:acme", "--period", "month", "--limit", "10.00", "--unit", "USD")
	require.Equal(t, 0, code)
	v := e2eJSON[events.BudgetView](t, out)
	require.Equal(t, events.Scope("org:acme"), v.Scope)
	require.Equal(t, events.PeriodMonth, v.Period)
	require.Equal(t, "10", v.Limit)
	require.Equal(t, "USD", v.Unit)
	require.Equal(t, "0", v.Spent)
	require.Equal(t, "10", v.Available)

	code, out = cli("budget", "put", "--scope", "user:u-17", "--period", "day", "--limit", "1", "--unit", "USD")
	require.Equal(t, 0, code)
	require.Equal(t, "1", e2eJSON[events.BudgetView](t, out).Limit)

	code, out = cli("budget", "get", "--scope", "org:acme", "--period", "month")
	require.Equal(t, 0, code)
	v = e2eJSON[events.BudgetView](t, out)
	require.Equal(t, "10", v.Limit)
	require.Equal(t, "0", v.Reserved)

	// Without --period, get lists every budget of the scope; put refuses
	// to guess a period (a usage error, nothing written).
	code, out = cli("budget", "get", "--scope", "user:u-17")
	require.Equal(t, 0, code)
	scoped := e2eJSON[events.BudgetListReply](t, out)
	require.Len(t, scoped.Budgets, 1)
	require.Equal(t, events.PeriodDay, scoped.Budgets[0].Period)
	code, _ = cli("budget", "put", "--scope", "org:acme", "--limit", "5")
	require.Equal(t, exitUsage, code)

	code, out = cli("budget", "list")
	require.Equal(t, 0, code)
	list := e2eJSON[events.BudgetListReply](t, out)
	require.Len(t, list.Budgets, 2)
	require.Equal(t, events.Scope("org:acme"), list.Budgets[0].Scope)
	require.Equal(t, events.Scope("user:u-17"), list.Budgets[1].Scope)

	code, out = cli("budget", "list", "--kind", "user")
	require.Equal(t, 0, code)
	list = e2eJSON[events.BudgetListReply](t, out)
	require.Len(t, list.Budgets, 1)
	require.Equal(t, events.Scope("user:u-17"), list.Budgets[0].Scope)

	// budget list pages through every budget; --max stops early.
	code, out = cli("budget", "list", "--page-size", "1")
	require.Equal(t, 0, code)
	list = e2eJSON[events.BudgetListReply](t, out)
	require.Len(t, list.Budgets, 2)
	require.Empty(t, list.NextCursor)
	code, out = cli("budget", "list", "--sort", "utilization", "--max", "1")
	require.Equal(t, 0, code)
	list = e2eJSON[events.BudgetListReply](t, out)
	require.Len(t, list.Budgets, 1)

	// An admit against two scopes reserves in both.
	code, out = cli("admit", "--scope", "org:acme", "--scope", "user:u-17", "--amount", "0.40", "--ttl", "5m")
	require.Equal(t, 0, code)
	a1 := e2eJSON[events.AdmitReply](t, out)
	require.True(t, a1.Admitted)
	require.NotEmpty(t, a1.ReservationID)
	require.Equal(t, "0.4", a1.Amount)
	require.Equal(t, "USD", a1.Unit)
	require.Len(t, a1.Balances, 2)
	require.NotNil(t, a1.ExpiresAt)

	// user:u-17 has 0.60 left: 0.75 is denied (exit 2), in neither budget.
	code, out = cli("admit", "--scope", "org:acme", "--scope", "user:u-17", "--amount", "0.75")
	require.Equal(t, 2, code)
	d := e2eJSON[events.AdmitReply](t, out)
	require.False(t, d.Admitted)
	require.NotNil(t, d.Denial)
	require.Equal(t, events.ReasonLimitReached, d.Denial.Reason)
	require.Equal(t, events.Scope("user:u-17"), d.Denial.Scope)
	require.Equal(t, "1", d.Denial.Limit)
	require.Equal(t, "0.4", d.Denial.Reserved)
	require.Equal(t, "0.75", d.Denial.Requested)

	code, out = cli("admit", "--scope", "org:acme", "--amount", "0.25")
	require.Equal(t, 0, code)
	a2 := e2eJSON[events.AdmitReply](t, out)
	require.True(t, a2.Admitted)

	code, out = cli("admit", "--scope", "org:acme", "--amount", "0.10", "--request-id", "walk-3")
	require.Equal(t, 0, code)
	a3 := e2eJSON[events.AdmitReply](t, out)
	require.True(t, a3.Admitted)
	require.Equal(t, "walk-3", a3.RequestID)

	// Settle the first with its actual cost, release the second.
	code, out = cli("settle", "--reservation", a1.ReservationID, "--actual", "0.30")
	require.Equal(t, 0, code)
	c := e2eJSON[events.CloseReply](t, out)
	require.Equal(t, events.StatusSettled, c.Status)
	require.Equal(t, "0.4", c.Reserved)
	require.Equal(t, "0.3", c.Actual)
	require.Empty(t, c.Overrun)

	code, out = cli("release", "--reservation", a2.ReservationID)
	require.Equal(t, 0, code)
	c = e2eJSON[events.CloseReply](t, out)
	require.Equal(t, events.StatusReleased, c.Status)
	require.Equal(t, "0.25", c.Reserved)

	// A bad amount is an error (exit 1) with a structured code.
	code, out = cli("admit", "--scope", "org:acme", "--amount", "-1")
	require.Equal(t, 1, code)
	er := e2eJSON[events.ErrorReply](t, out)
	require.NotNil(t, er.Error)
	require.Equal(t, events.CodeInvalidAmount, er.Error.Code)
	require.NotEmpty(t, er.Error.Message)
	require.Contains(t, string(out), `"invalid_amount"`)

	// Settle of an unknown reservation: exit 1, unknown_reservation.
	code, out = cli("settle", "--reservation", "rsv_nope", "--actual", "1")
	require.Equal(t, 1, code)
	require.Equal(t, events.CodeUnknownReservation, e2eJSON[events.ErrorReply](t, out).Error.Code)

	code, out = cli("budget", "get", "--scope", "org:acme", "--period", "month")
	require.Equal(t, 0, code)
	acme := e2eJSON[events.BudgetView](t, out)
	require.Equal(t, "0.3", acme.Spent)
	require.Equal(t, "0.1", acme.Reserved)
	require.EqualValues(t, 1, acme.Open)
	require.Equal(t, "9.6", acme.Available)
	code, out = cli("budget", "get", "--scope", "user:u-17", "--period", "day")
	require.Equal(t, 0, code)
	user := e2eJSON[events.BudgetView](t, out)
	require.Equal(t, "0.3", user.Spent)
	require.Equal(t, "0", user.Reserved)

	// A clean stop on SIGTERM, then a restart on the same data dir: the
	// ledger survives.
	p.stop(t)
	code, _ = cli("budget", "list", "--timeout", "500ms")
	require.Equal(t, 1, code, "no service after stop")
	startProc(t, true, serveArgs...)

	code, out = cli("budget", "get", "--scope", "org:acme", "--period", "month")
	require.Equal(t, 0, code)
	after := e2eJSON[events.BudgetView](t, out)
	require.Equal(t, acme.Spent, after.Spent)
	require.Equal(t, acme.Reserved, after.Reserved)
	require.Equal(t, acme.Open, after.Open)
	require.Equal(t, acme.Limit, after.Limit)
	code, out = cli("budget", "get", "--scope", "user:u-17", "--period", "day")
	require.Equal(t, 0, code)
	require.Equal(t, user.Spent, e2eJSON[events.BudgetView](t, out).Spent)

	// The reservation left open survived too: it can be settled now.
	code, out = cli("settle", "--reservation", a3.ReservationID, "--actual", "0.10")
	require.Equal(t, 0, code)
	require.Equal(t, events.StatusSettled, e2eJSON[events.CloseReply](t, out).Status)

	// What `nats micro info spendgate` shows: every endpoint.
	nc := connect(t, url)
	msg, err := nc.Request("$SRV.INFO."+streams.ServiceName, nil, 10*time.Second)
	require.NoError(t, err)
	var info micro.Info
	require.NoError(t, json.Unmarshal(msg.Data, &info), string(msg.Data))
	require.Equal(t, micro.InfoResponseType, info.Type)
	require.Equal(t, streams.ServiceName, info.Name)
	var subjects []string
	for _, ep := range info.Endpoints {
		subjects = append(subjects, ep.Subject)
	}
	require.Subset(t, subjects, []string{
		"spendgate.admit", "spendgate.settle", "spendgate.release", "spendgate.void",
		"spendgate.budget.put", "spendgate.budget.get", "spendgate.budget.list",
	})
}
