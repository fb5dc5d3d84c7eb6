package dashboard_test

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/dashboard"
	"github.com/spendgate/spendgate/ops"
	"github.com/spendgate/spendgate/service"
)

// Example mounts the dashboard on the operator listener, as serve --http
// does: the page is then at http://ADDR/dashboard/.
func Example() {
	var (
		ctx     context.Context
		js      jetstream.JetStream
		replica *service.Replica
		opsSrv  *ops.Server
	)
	if replica == nil {
		return // in serve: the running replica and its ops server
	}
	d, err := dashboard.New(dashboard.Config{
		JS: js, Layout: replica.Ledger.Layout(), Book: replica.Ledger,
		Denials: replica.Service.RecentDenials, Replica: "replica-1",
	})
	if err != nil {
		return
	}
	opsSrv.Handle(dashboard.Path, d)
	go func() { _ = d.Run(ctx) }() // follows the ledger for the charts
}
