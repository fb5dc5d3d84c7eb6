package replica

import (
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/streams"
)

// alertReader publishes the thresholds crossed by the revisions this
// replica wrote, as its fold hands them over (a ledger.Reader): each on
// layout.AlertSubject of its scope, its body the threshold.crossed.v1
// event and its HeaderAlertID the alert's id. Only the replica that wrote
// the revision publishes it, once, when its fold reaches it; the publish
// is core NATS (at most once: a replica that dies between its commit and
// its fold loses the message, never the event, which the feed relays
// durably).
type alertReader struct {
	publish func([]events.ThresholdCrossed)
}

// Fold publishes the ThresholdCrossed events of rev if this replica wrote
// it.
func (a alertReader) Fold(rev *gate.Revision, own bool) {
	if !own || rev.Kind != gate.KindLane {
		return
	}
	var crossed []events.ThresholdCrossed
	for _, b := range rev.Lane.Balances {
		for _, e := range b.Events {
			if tc, ok := e.(events.ThresholdCrossed); ok {
				crossed = append(crossed, tc)
			}
		}
	}
	if len(crossed) > 0 {
		a.publish(crossed)
	}
}

// alertPublisher returns what publishes alerts on nc.
func alertPublisher(nc *nats.Conn, layout streams.Layout, log *slog.Logger) func([]events.ThresholdCrossed) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(as []events.ThresholdCrossed) {
		for _, a := range as {
			data, err := events.EncodeEvent(a)
			if err != nil {
				log.Error("alert: encode", "err", err)
				continue
			}
			msg := nats.NewMsg(layout.AlertSubject(a.Balance.Scope))
			msg.Data = data
			msg.Header.Set(streams.HeaderAlertID, events.AlertID(a.Balance, a.Threshold))
			if err := nc.PublishMsg(msg); err != nil {
				log.Warn("alert: publish", "subject", msg.Subject, "err", err)
			}
		}
	}
}
