package dashboard_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/dashboard"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/testenv"
)

// heldBook is a bigBook whose Budgets waits for release: a build of the
// budget rows stays under way until the test lets it go.
type heldBook struct {
	*bigBook
	entered atomic.Int64
	release chan struct{}
}

func (h *heldBook) Budgets() []ledger.Budget {
	h.entered.Add(1)
	<-h.release
	return h.bigBook.Budgets()
}

// Eight requests for budgets that come while the rows are built, for
// different pages and tenants, wait for that one build and are answered
// from it (the same now; the pages cut from the same rows); a request
// within Reuse after is answered from it too, one after Reuse builds
// again. Before the single flight, every request built the rows: eight
// builds here (Builds counted 8 with current's single flight taken out).
func TestBudgetsAPI_OneBuild(t *testing.T) {
	bk, series := newBigBook(2000, 3, nil, bigNow)
	h := &heldBook{bigBook: bk, release: make(chan struct{})}
	var clock atomic.Int64
	clock.Store(bigNow.UnixNano())
	d, err := dashboard.New(dashboard.Config{Book: h, Series: series, Reuse: time.Minute,
		Now: func() time.Time { return time.Unix(0, clock.Load()).UTC() }})
	require.NoError(t, err)
	var arrived atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		d.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	get := func(query string) (dashboard.BudgetsReply, error) {
		var b dashboard.BudgetsReply
		resp, err := http.Get(srv.URL + dashboard.Path + "api/budgets" + query)
		if err != nil {
			return b, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return b, &json.UnsupportedValueError{Str: resp.Status}
		}
		return b, json.NewDecoder(resp.Body).Decode(&b)
	}

	queries := []string{"?limit=5", "?limit=10", "", "?limit=1000", "?tenant=", "?tenant=acme", "?limit=7", "?limit=3"}
	replies := make([]dashboard.BudgetsReply, len(queries))
	errs := make([]error, len(queries))
	var wg sync.WaitGroup
	for i, q := range queries {
		wg.Go(func() { replies[i], errs[i] = get(q) })
	}
	testenv.WaitFor(t, 30*time.Second, "every request to arrive while the rows are built", func() bool {
		return arrived.Load() == int64(len(queries)) && h.entered.Load() >= 1
	})
	close(h.release)
	wg.Wait()
	for i := range queries {
		require.NoError(t, errs[i], queries[i])
		require.Equal(t, replies[0].Now, replies[i].Now, "%s: from the same build", queries[i])
	}
	require.EqualValues(t, 1, dashboard.Builds(d), "eight requests while the rows were built: one build")
	require.Equal(t, 2000, replies[0].Total)
	require.Len(t, replies[0].Budgets, 5)
	require.Len(t, replies[1].Budgets, 10)
	require.Len(t, replies[2].Budgets, dashboard.DefaultBudgetPage)
	require.Len(t, replies[3].Budgets, 1000)
	require.Equal(t, 2000, replies[4].Total, "tenant=: the untenanted budgets")
	require.Equal(t, 0, replies[5].Total, "no budget of acme's")
	require.Empty(t, replies[5].NextCursor)

	// Within Reuse: pages of the same build follow each other.
	next, err := get("?limit=5&cursor=" + replies[0].NextCursor)
	require.NoError(t, err)
	require.Equal(t, replies[0].Now, next.Now)
	require.Equal(t, replies[1].Budgets, append(replies[0].Budgets, next.Budgets...), "two pages of 5 are the page of 10")
	require.EqualValues(t, 1, dashboard.Builds(d))

	// After Reuse (by the clock), a new build.
	clock.Add(int64(time.Minute))
	later, err := get("?limit=5")
	require.NoError(t, err)
	require.EqualValues(t, 2, dashboard.Builds(d))
	require.Equal(t, replies[0].Now.Add(time.Minute), later.Now)
}

// A build that took long is reused five times as long as it took, when
// that is longer than Reuse: a build held for a second, with Reuse 100 ms,
// still answers a request 200 ms later by the clock (before, it built
// again: at 100,000 budgets a build takes about 6 s, and with a tab open
// builds then ran back to back on one core), and not a minute later.
func TestBudgetsAPI_LongBuildReusedLonger(t *testing.T) {
	bk, series := newBigBook(50, 3, nil, bigNow)
	h := &heldBook{bigBook: bk, release: make(chan struct{})}
	var clock atomic.Int64
	clock.Store(bigNow.UnixNano())
	d, err := dashboard.New(dashboard.Config{Book: h, Series: series, Reuse: 100 * time.Millisecond,
		Now: func() time.Time { return time.Unix(0, clock.Load()).UTC() }})
	require.NoError(t, err)
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	get := func() {
		resp, err := http.Get(srv.URL + dashboard.Path + "api/budgets?limit=5")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		resp.Body.Close()
	}
	time.AfterFunc(time.Second, func() { close(h.release) }) // the build takes a second
	get()
	require.EqualValues(t, 1, dashboard.Builds(d))
	clock.Add(int64(200 * time.Millisecond))
	get()
	require.EqualValues(t, 1, dashboard.Builds(d), "reused: it took a second, so it answers for five")
	clock.Add(int64(time.Minute)) // well past five times what it took, however slow the machine
	get()
	require.EqualValues(t, 2, dashboard.Builds(d), "past five times what it took: built again")
}
