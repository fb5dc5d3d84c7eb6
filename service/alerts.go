package service

import (
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// alertPublisher returns the sink of the thresholds this replica's
// commits crossed: each is published on layout.AlertSubject of its scope,
// its body the threshold.crossed.v1 event and its HeaderAlertID the
// alert's id. Only the replica whose revision crossed the threshold
// publishes it, once, after the commit; the publish is core NATS (at most
// once: a replica that dies between its commit and the publish loses the
// message, never the event, which the feed relays durably).
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
