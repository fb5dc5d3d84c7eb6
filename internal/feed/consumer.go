package feed

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/streams"
)

// DefaultAckWait is ConsumerConfig's AckWait: how long after a consumer
// stopped (crashed) its unacknowledged event is delivered again.
const DefaultAckWait = 5 * time.Second

// ConsumerConfig is a durable consumer of the whole feed (or of the
// subjects in filters) that delivers in feed order and at least once:
// explicit acks, one event in flight at a time (MaxAckPending 1, so a
// redelivery can never come after a newer event), DefaultAckWait. With a
// Cursor kept with the consumer's own state, each event is processed
// exactly once. A consumer that needs more throughput reads with an
// ordered consumer from the feed sequence it stored instead.
func ConsumerConfig(l streams.Layout, durable string, filters ...string) jetstream.ConsumerConfig {
	if len(filters) == 0 {
		filters = []string{l.FeedFilter()}
	}
	c := jetstream.ConsumerConfig{
		Durable:       durable,
		Description:   "spendgate feed.v1 consumer",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       DefaultAckWait,
		MaxAckPending: 1,
	}
	if len(filters) == 1 {
		c.FilterSubject = filters[0]
	} else {
		c.FilterSubjects = filters
	}
	return c
}
