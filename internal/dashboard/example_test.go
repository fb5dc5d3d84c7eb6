package dashboard_test

import (
	"github.com/spendgate/spendgate/internal/dashboard"
	"github.com/spendgate/spendgate/internal/ops"
	"github.com/spendgate/spendgate/internal/replica"
)

// Example mounts the dashboard on the operator listener, as serve --http
// does: the page is then at http://ADDR/dashboard/.
func Example() {
	var (
		replica *replica.Replica
		opsSrv  *ops.Server
	)
	if replica == nil {
		return // in serve: the running replica and its ops server
	}
	d, err := dashboard.New(dashboard.Config{
		Book: replica.Ledger, Series: replica.Series, // the replica's fold keeps the charts' series
		Denials: replica.RecentDenials, Replica: "replica-1", // every replica's, from the denial stream
	})
	if err != nil {
		return
	}
	opsSrv.Handle(dashboard.Path, d)
}
