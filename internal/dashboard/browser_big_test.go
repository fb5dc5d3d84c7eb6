package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/dashboard"
)

// With 100,000 budgets the page loads the 500 nearest their limit, in one
// request (before: 10 requests of 500, 5,000 rows), counts every budget,
// and loads 500 more when Show more is pressed; it never has two
// requests for budgets under way at once.
func TestDashboard_BrowserBig(t *testing.T) {
	ctx, problems := browser(t, 1360, 1250)
	bk, series := newBigBook(100_000, 0, nil, bigNow) // no spend: the page, not the forecast (BenchmarkBudgetsAPI)
	d, err := dashboard.New(dashboard.Config{Book: bk, Series: series, Now: func() time.Time { return bigNow }})
	require.NoError(t, err)
	var asked, inFlight, most atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == dashboard.Path+"api/budgets" {
			asked.Add(1)
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
		}
		d.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	var rows, rowsAfter int
	var shown, total string
	var moreHidden bool
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+dashboard.Path),
		chromedp.WaitVisible(`body[data-loaded="true"]`),
		chromedp.Evaluate(`document.querySelectorAll('#budgets tbody tr').length`, &rows),
		chromedp.Text(`#c-budgets`, &total),
		chromedp.Text(`#shown`, &shown),
		chromedp.Evaluate(`document.getElementById('more').hidden`, &moreHidden),
	))
	require.Equal(t, 500, rows)
	require.Equal(t, "100000", total)
	require.Contains(t, shown, "500 of 500 loaded (100000 budgets")
	require.False(t, moreHidden)
	require.EqualValues(t, 1, asked.Load(), "one request for the 500 shown")
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`#more`),
		chromedp.Poll(`document.querySelectorAll('#budgets tbody tr').length === 1000`, nil, chromedp.WithPollingTimeout(60*time.Second)),
		chromedp.Evaluate(`document.querySelectorAll('#budgets tbody tr').length`, &rowsAfter),
	))
	require.Equal(t, 1000, rowsAfter)
	require.EqualValues(t, 1, most.Load(), "never two requests for budgets at once")
	require.Empty(t, problems())
}
