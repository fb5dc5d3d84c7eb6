package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/streams"
)

var (
	feedCommand = command{
		name:     "spendgate feed",
		synopsis: "consumer --tenant NAME [flags]",
		about: `The live event feed's administration. One command so far:

  consumer   create a tenant's feed consumer`,
	}
	feedConsumerCommand = command{
		name:     "spendgate feed consumer",
		synopsis: "--tenant NAME [--replace] [--bucket NAME] [--nats-url URL] ...",
		about: `Creates tenant NAME's one consumer of the live event feed, t-NAME on stream
<bucket>_feed: a durable pull consumer of the tenant's events alone
(<prefix>feed.v1.*.*.*.t.NAME.>), explicit acks, one event in flight. The
tenant's account (spendgate roles --tenant NAME) may read it, pull from it and
acknowledge, but not create or change it, and the feed role may not touch it,
so the operator runs this once per tenant as the admin role (the only role
that may create, read and delete it, with the tenant's filter alone), after
the replicas have started with --feed. It prints {"stream", "consumer",
"filter", "created", "replaced"}; a pull consumer of that name with the
tenant's filter is left as it is ("created": false). A push consumer of that
name, or one with another filter (replicas log and count one they find), is
refused; with --replace it is deleted and made again ("replaced": true), and
the tenant reads its feed again from the start of what the feed keeps.`,
	}
)

// feedCmd is spendgate feed: a subcommand, then feed.EnsureTenantConsumer.
func feedCmd(args []string) int {
	if len(args) == 0 || args[0] != "consumer" {
		return feedCommand.noSubcommand(args, "which feed command? (consumer)")
	}
	fs := newFlagSet("feed consumer")
	var c clientFlags
	c.register(fs)
	bucket := fs.String("bucket", streams.DefaultBucket, "ledger bucket name")
	tenant := fs.String("tenant", "", "the tenant whose consumer to create (required)")
	replace := fs.Bool("replace", false, "delete a consumer of the tenant's name that is not the tenant's pull consumer of its filter, and make it again")
	if code, ok := feedConsumerCommand.parse(fs, args[1:]); !ok {
		return code
	}
	if *tenant == "" {
		return feedConsumerCommand.usageError(fs, "--tenant is required")
	}
	if err := events.ValidateTenant(*tenant); err != nil {
		return feedConsumerCommand.usageError(fs, "--tenant: "+err.Error())
	}
	layout, err := streams.New(streams.Config{Bucket: *bucket, Prefix: c.prefix})
	if err != nil {
		return feedConsumerCommand.usageError(fs, err.Error())
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "spendgate feed consumer:", err)
		return exitError
	}
	nc, err := c.connect("spendgate-feed")
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var created, replaced bool
	if *replace {
		created, replaced, err = feed.ReplaceTenantConsumer(ctx, js, layout, *tenant)
	} else {
		created, err = feed.EnsureTenantConsumer(ctx, js, layout, *tenant)
	}
	if errors.Is(err, feed.ErrTenantConsumerMismatch) {
		err = fmt.Errorf("%w; run this again with --replace to delete it and make it again", err)
	}
	if err != nil {
		return fail(err)
	}
	out, err := json.MarshalIndent(feedConsumerOut{
		Stream: layout.FeedStreamName(), Consumer: streams.TenantFeedConsumer(*tenant),
		Filter: layout.TenantFeedFilter(*tenant), Created: created, Replaced: replaced,
	}, "", "  ")
	if err == nil {
		_, err = fmt.Println(string(out))
	}
	if err != nil {
		return fail(err)
	}
	return exitOK
}

// feedConsumerOut is what spendgate feed consumer prints.
type feedConsumerOut struct {
	Stream   string `json:"stream"`
	Consumer string `json:"consumer"`
	Filter   string `json:"filter"`
	Created  bool   `json:"created"`
	Replaced bool   `json:"replaced"`
}
