package streams_test

import (
	"fmt"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Every key and subject is spelled here, nowhere else.
func ExampleLayout() {
	l := streams.Default()
	bal := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}
	fmt.Println(l.StreamName())
	fmt.Println(streams.BudgetKey(bal.Budget()))
	fmt.Println(streams.BalanceKey(bal))
	fmt.Println(l.Subject(l.LaneKey(bal)))
	fmt.Println(l.Endpoint(streams.EndpointAdmit))
	// Output:
	// KV_spendgate
	// budget.org.acme.month
	// balance.org.acme.month.2026-11
	// $KV.spendgate.lane.0
	// spendgate.admit
}
