package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/dashboard"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/report"
)

// bigBook is a dashboard.Book of n budgets, as an agent platform's
// ledger holds them (one short-lived budget per agent run), each with a
// balance behind a read-write lock as the ledger's book has one; locked
// counts the read locks taken.
type bigBook struct {
	mu      sync.RWMutex
	budgets []ledger.Budget
	bal     map[events.BalanceRef]ledger.Balance
}

func (b *bigBook) Budgets() []ledger.Budget {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return append([]ledger.Budget(nil), b.budgets...)
}

func (b *bigBook) Budget(ref events.BudgetRef) (ledger.Budget, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, x := range b.budgets {
		if x.Ref == ref {
			return x, true
		}
	}
	return ledger.Budget{}, false
}

func (b *bigBook) Balance(ref events.BalanceRef) ledger.Balance {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.bal[ref]
}

// bigNow is the clock of the big books: their spends are in the hour
// before it.
var bigNow = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// budgetsFromEnv is SPENDGATE_BUDGETS, or def.
func budgetsFromEnv(def int) int {
	if v, err := strconv.Atoi(os.Getenv("SPENDGATE_BUDGETS")); err == nil && v > 0 {
		return v
	}
	return def
}

// newBigBook returns a book of n day budgets of 100 USD, each spent in
// steps of spends calls over the hour before now (every third budget
// more than the others), and the series of those spends (folded into
// series, or a new one if nil).
func newBigBook(n, spends int, series *report.Series, now time.Time) (*bigBook, *report.Series) {
	bk := &bigBook{bal: make(map[events.BalanceRef]ledger.Balance, n)}
	if series == nil {
		series = report.NewSeries()
	}
	inst := events.CalendarOf(events.PeriodDay, nil).Instance(now)
	refs := make([]events.BalanceRef, n)
	for i := range n {
		ref := events.BudgetRef{Scope: events.Scope("user:run-" + strconv.Itoa(i)), Period: events.PeriodDay}
		bk.budgets = append(bk.budgets, ledger.Budget{Ref: ref, Limit: events.MustMoney("100"), Unit: "USD"})
		refs[i] = events.BalanceRef{Scope: ref.Scope, Period: ref.Period, Instance: inst}
	}
	for s := 1; s <= spends; s++ {
		rev := &gate.Revision{Kind: gate.KindLane, At: now.Add(-time.Hour + time.Duration(s)*time.Hour/time.Duration(spends+1)),
			Lane: &events.LaneRevision{Balances: make([]events.BalanceRevision, 0, n)}}
		for i, ref := range refs {
			spent := events.MoneyFromInt(int64(s * (1 + i%3)))
			rev.Lane.Balances = append(rev.Lane.Balances, events.BalanceRevision{Balance: ref, Unit: "USD", Limit: events.MustMoney("100"), Spent: spent})
			bk.bal[ref] = ledger.Balance{Ref: ref, Defined: true, Unit: "USD", Limit: events.MustMoney("100"), Spent: spent}
		}
		series.Fold(rev, false)
	}
	return bk, series
}

// BenchmarkBudgetsAPI: one GET /dashboard/api/budgets?limit=5 over a book
// of 30,000 budgets (SPENDGATE_BUDGETS=n for another size) each with 4
// points in its series, as the agent platform's review measured it, each
// request building the rows (Reuse below 0):
//
//	go test -run '^$' -bench BenchmarkBudgetsAPI -benchtime 1x -count 5 ./internal/dashboard/
func BenchmarkBudgetsAPI(b *testing.B) { benchBudgetsAPI(b, -1, "?limit=5") }

// BenchmarkBudgetsAPI_Reused: the same request, and one of 500, answered
// from a build (Reuse): what every request but one in 2 s costs.
func BenchmarkBudgetsAPI_Reused(b *testing.B) {
	b.Run("limit=5", func(b *testing.B) { benchBudgetsAPI(b, time.Hour, "?limit=5") })
	b.Run("limit=500", func(b *testing.B) { benchBudgetsAPI(b, time.Hour, "?limit=500") })
}

func benchBudgetsAPI(b *testing.B, reuse time.Duration, query string) {
	bk, series := newBigBook(budgetsFromEnv(30_000), 4, nil, bigNow)
	d, err := dashboard.New(dashboard.Config{Book: bk, Series: series, Reuse: reuse, Now: func() time.Time { return bigNow }})
	if err != nil {
		b.Fatal(err)
	}
	get := func() {
		w := httptest.NewRecorder()
		d.ServeHTTP(w, httptest.NewRequest(http.MethodGet, dashboard.Path+"api/budgets"+query, nil))
		if w.Code != http.StatusOK {
			b.Fatalf("HTTP %d: %s", w.Code, w.Body)
		}
	}
	if reuse > 0 {
		get() // the build the others reuse
	}
	b.ResetTimer()
	for range b.N {
		get()
	}
}
