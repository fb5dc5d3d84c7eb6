package bench

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/testenv"
)

// The restart scenario reads durations from the replica's JSON log, which
// writes them with their unit; a replica of an earlier build wrote
// nanoseconds. Reading the unit form as a number gave 0 and "no snapshot
// on stop in its log".
func TestLogDuration(t *testing.T) {
	require.Equal(t, 52300*time.Microsecond, logDuration("52.3ms"))
	require.Equal(t, 2*time.Second, logDuration(float64(2e9)))
	require.Zero(t, logDuration(nil))
	require.Zero(t, logDuration("soon"))
}

// The gateway shape's history (--restart-shape gateway) must be what an
// LLM gateway writes, or the restart it measures is not that of a gateway's
// ledger: every reservation priced from the model on the org, a team and a
// user, with its metadata, and settled from its usage. Its write runs here
// for 200 reservations against a real server and replica, and the ledger
// must hold exactly them: each budget's spend is the cost at the model's
// price of the usage of the reservations that named it (an amount instead
// of a priced admit, a settle of the maximum or an actual, or a scope left
// out all change a sum), nothing is open or reserved, and the report has
// 200 settled reservations under the model and the features.
func TestRestartGatewayShape_WritesPricedMultiScopeReservations(t *testing.T) {
	const n = 200
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env := testenv.New(t)
	env.StartSpendgate(t, testenv.Spendgate{Reports: true, SweepInterval: -1})
	var clients []*client.Client
	for i := 0; i < 2; i++ {
		cl, err := client.New(env.Connect(t), client.WithTimeout(benchRequestTimeout), client.WithRetries(1))
		require.NoError(t, err)
		clients = append(clients, cl)
	}
	o := DefaultOptions()
	o.RestartShape = RestartShapeGateway
	c, err := o.resolve()
	require.NoError(t, err)
	r := newRestartRun(c, env.Conn, env.Layout, t.Logf)
	require.NoError(t, r.prepare(ctx, nil, clients[0]))
	w := r.write(ctx, clients, n)
	require.NoError(t, w.err)
	require.Zero(t, w.errors, w.firstErr)

	// What each reservation should have cost, by scope and by feature,
	// from the shape's requests, each checked to be a gateway's.
	price := func(s string) *big.Rat {
		p, ok := new(big.Rat).SetString(s)
		require.True(t, ok, s)
		return p.Quo(p, big.NewRat(1_000_000, 1))
	}
	in, out := price(restartPriceInput), price(restartPriceOutput)
	want := map[string]*big.Rat{}
	wantCount := map[string]int64{}
	add := func(key string, cost *big.Rat) {
		if want[key] == nil {
			want[key] = new(big.Rat)
		}
		want[key].Add(want[key], cost)
		wantCount[key]++
	}
	for i := 0; i < n; i++ {
		call := r.gw.call(i)
		req := call.admit()
		require.Empty(t, req.Amount, "priced from the model, not an amount")
		require.Equal(t, restartModel, req.Model)
		require.Equal(t, int64(restartMaxOutput), req.MaxOutputTokens)
		require.GreaterOrEqual(t, req.InputTokens, int64(restartMinInput))
		require.LessOrEqual(t, req.InputTokens, int64(restartMaxInput))
		u := call.usage()
		require.Equal(t, req.InputTokens, u.InputTokens, "the input settles as admitted")
		require.Positive(t, u.OutputTokens)
		require.Less(t, u.OutputTokens, req.MaxOutputTokens, "less output than the maximum")
		require.Len(t, req.Scopes, 3)
		for k, kind := range []string{"org", "team", "user"} {
			require.Equal(t, kind, events.Scope(req.Scopes[k]).Kind(), req.Scopes)
		}
		require.Equal(t, restartModel, req.Metadata["model"])
		require.Contains(t, restartFeatures, req.Metadata["feature"])
		cost := new(big.Rat).Mul(in, big.NewRat(u.InputTokens, 1))
		cost.Add(cost, new(big.Rat).Mul(out, big.NewRat(u.OutputTokens, 1)))
		for _, s := range req.Scopes {
			add(s, cost)
		}
		add("feature="+req.Metadata["feature"], cost)
		add("model="+req.Metadata["model"], cost)
	}
	require.Equal(t, 1+restartTeams+n+len(restartFeatures)+1, len(want), "the org, every team, 200 users, every feature and the model")
	same := func(what, got string, want *big.Rat) {
		g, ok := new(big.Rat).SetString(got)
		require.True(t, ok, "%s: %q", what, got)
		require.Zero(t, g.Cmp(want), "%s: %s, want %s", what, got, want.FloatString(9))
	}

	// The budgets: every one of the shape's, each spent exactly its
	// reservations' usage, none open.
	budgets := 0
	for _, kind := range []string{"org", "team", "user"} {
		list, err := clients[0].ListBudgets(ctx, kind)
		require.NoError(t, err)
		for _, b := range list.Budgets {
			budgets++
			scope := string(b.Scope)
			if want[scope] == nil {
				require.Equal(t, "0", b.Spent, scope)
				continue
			}
			same(scope+" spent", b.Spent, want[scope])
			require.Zero(t, b.Open, scope)
			same(scope+" reserved", b.Reserved, new(big.Rat))
		}
	}
	require.Equal(t, 1+restartTeams+restartUsers, budgets)

	// The report: 200 settled under the model, and by feature and scope.
	for _, by := range []string{"model", "feature", "scope"} {
		rep, err := clients[0].Report(ctx, events.ReportRequest{By: by})
		require.NoError(t, err, by)
		var total int64
		for _, g := range rep.Groups {
			key := g.Value
			if by != "scope" {
				key = by + "=" + g.Value
			}
			require.NotNil(t, want[key], "%s: an unexpected group %q", by, g.Value)
			require.Equal(t, wantCount[key], g.Settled, key)
			require.Equal(t, wantCount[key], g.Reservations, key)
			same(key+" spend", g.Spend, want[key])
			total += g.Settled
		}
		if by == "scope" {
			total /= 3 // each reservation in its three scopes
		}
		require.Equal(t, int64(n), total, by)
	}
}
