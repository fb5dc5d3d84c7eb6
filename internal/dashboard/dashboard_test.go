package dashboard_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/dashboard"
	"github.com/spendgate/spendgate/testenv"
)

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
	return resp.StatusCode
}

func TestDashboard_API(t *testing.T) {
	s := seed(t)
	var b dashboard.BudgetsReply
	testenv.WaitFor(t, 30*time.Second, "the series to catch up", func() bool {
		getJSON(t, s.srv.URL+"/dashboard/api/budgets", &b)
		return b.Ready
	})
	require.Len(t, b.Budgets, 4)
	got := map[string][3]string{}
	var order []string
	for _, r := range b.Budgets {
		got[string(r.Scope)] = [3]string{r.Spent, r.Reserved, r.Limit}
		order = append(order, string(r.Scope))
	}
	require.Equal(t, []string{"org:acme", "team:search", "user:bob", "team:ads"}, order, "nearest to the limit first")
	require.Equal(t, [3]string{"85", "0", "100"}, got["org:acme"])
	require.Equal(t, [3]string{"10", "5", "50"}, got["team:search"])
	require.Equal(t, int64(8500), b.Budgets[0].UsedBP)
	// The live exposure bound, with its cap, as budget get and the gauge
	// state it; a budget without a cap and with nothing exposed shows
	// none.
	require.Equal(t, [2]string{"7", "10"}, [2]string{b.Budgets[1].Exposure, b.Budgets[1].ExposureCap}, "team:search")
	require.Equal(t, [2]string{"", ""}, [2]string{b.Budgets[0].Exposure, b.Budgets[0].ExposureCap}, "org:acme")
	bal := s.r.Ledger.Balance(events.BalanceRef{Scope: "team:search", Period: events.PeriodDay, Instance: b.Budgets[1].Instance})
	require.Equal(t, bal.Exposure.String(), b.Budgets[1].Exposure, "the book's figure")
	require.Equal(t, int64(3000), b.Budgets[1].UsedBP)
	require.NotEmpty(t, b.Budgets[0].Forecast.PerHour, "acme spent just now: a pace")

	require.Equal(t, [3]int{4, 1, 0}, [3]int{b.Total, b.Near, b.Over})
	require.Empty(t, b.NextCursor)

	// Paged: one budget a page walks the same order, each budget once.
	var paged []string
	cursor := ""
	for range 10 {
		var p dashboard.BudgetsReply
		require.Equal(t, http.StatusOK, getJSON(t, s.srv.URL+"/dashboard/api/budgets?limit=1&cursor="+cursor, &p))
		require.LessOrEqual(t, len(p.Budgets), 1)
		require.Equal(t, 4, p.Total)
		for _, r := range p.Budgets {
			paged = append(paged, string(r.Scope))
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	require.Equal(t, order, paged)
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "cursor=***", "cursor=bm9wZQ"} {
		var bad events.ErrorReply
		require.Equal(t, http.StatusBadRequest, getJSON(t, s.srv.URL+"/dashboard/api/budgets?"+q, &bad), q)
		require.Equal(t, events.CodeInvalidRequest, bad.Error.Code, q)
	}

	var sr dashboard.SeriesReply
	require.Equal(t, http.StatusOK, getJSON(t, s.srv.URL+"/dashboard/api/series?scope=org:acme&period=month", &sr))
	require.NotEmpty(t, sr.Points)
	require.Equal(t, "85", sr.Points[len(sr.Points)-1].Spent)
	var bad map[string]any
	require.Equal(t, http.StatusBadRequest, getJSON(t, s.srv.URL+"/dashboard/api/series?scope=nope&period=month", &bad))
	require.Equal(t, http.StatusNotFound, getJSON(t, s.srv.URL+"/dashboard/api/series?scope=org:none&period=month", &bad))

	var dr dashboard.DenialsReply
	getJSON(t, s.srv.URL+"/dashboard/api/denials", &dr)
	require.Len(t, dr.Denials, 1)
	require.Equal(t, "too-big", dr.Denials[0].RequestID)
	require.Equal(t, "user:bob", string(dr.Denials[0].Denial.Scope))
	require.Nil(t, dr.Denials[0].Denial.ResetsAt, "a lifetime budget never resets")

	// Read-only, and a wrong method or path is answered in the API's
	// error shape with a code, not the mux's plain text.
	resp, err := http.Post(s.srv.URL+"/dashboard/api/budgets", "application/json", nil)
	require.NoError(t, err)
	var wrong events.ErrorReply
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&wrong))
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "read-only")
	require.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))
	require.Equal(t, dashboard.CodeMethod, wrong.Error.Code)
	for _, path := range []string{"/dashboard/api/budget", "/dashboard/api/", "/dashboard/api/budgets/x"} {
		var missing events.ErrorReply
		require.Equal(t, http.StatusNotFound, getJSON(t, s.srv.URL+path, &missing), path)
		require.Equal(t, dashboard.CodeNotFound, missing.Error.Code, path)
		require.Contains(t, missing.Error.Message, "/dashboard/api/budgets, /dashboard/api/series", path)
	}
}

// TestDashboard_RetiredBudget: a retired budget leaves the dashboard's
// list (it holds nothing any more), and its series, asked for by scope,
// says it is retired, with no points, rather than an empty chart that
// looks like a budget nothing was spent in. It can fail: without the
// flag the series reply reads as a live budget with no spend.
func TestDashboard_RetiredBudget(t *testing.T) {
	s := seed(t)
	var sr dashboard.SeriesReply
	require.Equal(t, http.StatusOK, getJSON(t, s.srv.URL+"/dashboard/api/series?scope=org:acme&period=month", &sr))
	require.NotEmpty(t, sr.Points)
	require.False(t, sr.Budget.Retired)
	_, _, err := s.r.Ledger.RetireBudget(t.Context(), events.BudgetRef{Scope: "org:acme", Period: events.PeriodMonth}, "", "closed", time.Now())
	require.NoError(t, err)
	testenv.WaitFor(t, 30*time.Second, "the retirement reaches the dashboard", func() bool {
		var b dashboard.BudgetsReply
		getJSON(t, s.srv.URL+"/dashboard/api/budgets", &b)
		return b.Total == 3
	})
	sr = dashboard.SeriesReply{} // a fresh decode: omitted fields must not keep the first reply's
	require.Equal(t, http.StatusOK, getJSON(t, s.srv.URL+"/dashboard/api/series?scope=org:acme&period=month", &sr))
	require.True(t, sr.Budget.Retired)
	require.Empty(t, sr.Points)
	require.Equal(t, dashboard.Forecast{}, sr.Budget.Forecast, "no pace or exhaustion date for a budget that admits nothing")
	require.Equal(t, [2]string{"85", "0"}, [2]string{sr.Budget.Spent, sr.Budget.Available}, "what it spent; nothing available")
}
