package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spendgate/spendgate/projector"
)

// offlineWithin is the default deadline of an offline tool that reads the
// book of record (audit, export, report --replay, archive, trim): a whole
// replay of 10 million reservations took about 4 minutes.
const offlineWithin = 30 * time.Minute

// withinFlag declares --within, the deadline of the whole run.
func withinFlag(fs *flag.FlagSet, def time.Duration) *time.Duration {
	return fs.Duration("within", def, "give up after this long; a read that gets no message for "+
		projector.ReadStall.String()+" fails sooner, naming the node whose copy of the stream it read")
}

// offlineContext is ended by SIGINT, SIGTERM, or within.
func offlineContext(within time.Duration) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, within)
	return ctx, func() { cancel(); stop() }
}
