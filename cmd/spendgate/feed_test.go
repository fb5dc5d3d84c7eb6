package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/dashboard"
	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestServe_FeedAndDashboard runs serve --feed --http: the events of a
// budget put, an admit and a settle reach the feed stream in order, and the
// dashboard's page and JSON answer on the --http listener, the denial
// included.
func TestServe_FeedAndDashboard(t *testing.T) {
	t.Parallel()
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	startProc(t, true, "serve", "--data-dir", filepath.Join(t.TempDir(), "data"), "--listen", listen, "--http", httpAddr, "--feed")
	nc := connect(t, "nats://"+listen)
	var bv events.BudgetView
	require.Nil(t, e2eRequest(t, nc, "spendgate.budget.put", events.BudgetPutRequest{Scope: "org:f", Period: "month", Limit: "1", Unit: "USD"}, &bv))
	var ar events.AdmitReply
	require.Nil(t, e2eRequest(t, nc, "spendgate.admit", events.AdmitRequest{RequestID: "f-1", Scopes: []string{"org:f"}, Amount: "0.5"}, &ar))
	require.True(t, ar.Admitted)
	var cr events.CloseReply
	require.Nil(t, e2eRequest(t, nc, "spendgate.settle", events.SettleRequest{ReservationID: ar.ReservationID, Actual: "0.25"}, &cr))
	var denied events.AdmitReply
	require.Nil(t, e2eRequest(t, nc, "spendgate.admit", events.AdmitRequest{RequestID: "f-2", Scopes: []string{"org:f"}, Amount: "5"}, &denied))
	require.False(t, denied.Admitted)

	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := streams.Default()
	var types []events.Type
	testenv.WaitFor(t, 30*time.Second, "three events in the feed", func() bool {
		s, err := js.Stream(ctx, l.FeedStreamName())
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs >= 3
	})
	s, err := js.Stream(ctx, l.FeedStreamName())
	require.NoError(t, err)
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		fm, err := feed.Decode(m.Data)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(m.Subject, "spendgate.feed.v1."), m.Subject)
		types = append(types, fm.Type)
	}
	require.Equal(t, []events.Type{events.TypeBudgetDefinedV2, events.TypeReservationOpened, events.TypeReservationSettled}, types)

	base := "http://" + httpAddr + dashboard.Path
	code, body := httpStatus(t, base)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Spend dashboard")
	code, body = httpStatus(t, base+"api/budgets")
	require.Equal(t, http.StatusOK, code)
	var br dashboard.BudgetsReply
	require.NoError(t, json.Unmarshal([]byte(body), &br))
	require.Len(t, br.Budgets, 1)
	require.Equal(t, "0.25", br.Budgets[0].Spent)
	// The recent denials are read from the denial stream, where the
	// record lands off the request path: wait for it.
	testenv.WaitFor(t, 30*time.Second, "the denial in the dashboard's recent denials", func() bool {
		code, body = httpStatus(t, base+"api/denials")
		require.Equal(t, http.StatusOK, code)
		return strings.Contains(body, `"request_id":"f-2"`)
	})
}

// TestServe_TenantConsumerCheck: a replica with --feed checks the tenants'
// feed consumers at start. One that reads the whole feed under a tenant's
// name (made, as the feed login could on main, before the replica starts)
// is logged with the repair command and shown in /metrics; spendgate feed
// consumer --tenant refuses it and, with --replace, repairs it. It fails if
// the replica did not run the check or did not report what it found.
func TestServe_TenantConsumerCheck(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := streams.Default()
	_, err := streams.EnsureFeed(ctx, env.JS, l)
	require.NoError(t, err)
	wide := feed.TenantConsumerConfig(l, "acme")
	wide.FilterSubject = l.FeedFilter()
	_, err = env.JS.CreateOrUpdateConsumer(ctx, l.FeedStreamName(), wide)
	require.NoError(t, err)

	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	p := startProc(t, true, "serve", "--nats-url", env.URL(), "--replicas", "1", "--feed", "--http", httpAddr)
	testenv.WaitFor(t, 30*time.Second, "the check reports t-acme", func() bool {
		_, body := httpStatus(t, "http://"+httpAddr+"/metrics")
		return strings.Contains(body, "spendgate_feed_tenant_consumers_wrong 1") && strings.Contains(p.out.String(), "consumer=t-acme")
	})
	require.Contains(t, p.out.String(), "spendgate feed consumer --tenant acme --replace")

	r := runCLI(t, []string{"NATS_URL=" + env.URL()}, "feed", "consumer", "--tenant", "acme")
	require.Equal(t, 1, r.code, r.stdout)
	require.Contains(t, r.stderr, "--replace")
	r = runCLI(t, []string{"NATS_URL=" + env.URL()}, "feed", "consumer", "--tenant", "acme", "--replace")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"replaced": true`)
	c, err := env.JS.Consumer(ctx, l.FeedStreamName(), streams.TenantFeedConsumer("acme"))
	require.NoError(t, err)
	require.Equal(t, l.TenantFeedFilter("acme"), c.CachedInfo().Config.FilterSubject)
}
