package metrics_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/spendgate/spendgate/internal/metrics"
)

func ExampleSet_RegisterBudgets() {
	m := metrics.New(metrics.BuildInfo{Version: "dev"})
	m.Admits.WithLabelValues(metrics.ResultDenied, "limit_reached").Inc()
	// The book's budgets, exact decimal strings: a scope may have a budget
	// in each of several units.
	m.RegisterBudgets(100, func() []metrics.BudgetSample {
		return []metrics.BudgetSample{
			{Scope: "org:acme", Period: "month", Unit: "USD", Open: 2, Spent: "80", Reserved: "10", Limit: "100"},
			{Scope: "org:acme", Period: "month", Unit: "requests", Open: 2, Spent: "40", Reserved: "2", Limit: "1000"},
		}
	})
	srv := httptest.NewServer(m.Handler()) // serve mounts it at /metrics
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "spendgate_admits_total") || strings.HasPrefix(line, "spendgate_budget_utilization_ratio") {
			fmt.Println(line)
		}
	}
	// Every admit result and denial reason is there from the start, at 0.
	// Output:
	// spendgate_admits_total{reason="",result="admitted"} 0
	// spendgate_admits_total{reason="budget_disabled",result="denied"} 0
	// spendgate_admits_total{reason="exposure_cap",result="denied"} 0
	// spendgate_admits_total{reason="limit_reached",result="denied"} 1
	// spendgate_admits_total{reason="unit_mismatch",result="denied"} 0
	// spendgate_admits_total{reason="unknown_budget",result="denied"} 0
	// spendgate_admits_total{reason="unpriced_model",result="denied"} 0
	// spendgate_budget_utilization_ratio{period="month",scope="org:acme",unit="USD"} 0.9
	// spendgate_budget_utilization_ratio{period="month",scope="org:acme",unit="requests"} 0.042
}
