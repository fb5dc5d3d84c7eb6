package events_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestThresholdCrossed_Golden freezes threshold.crossed.v1.
func TestThresholdCrossed_Golden(t *testing.T) {
	ev := events.ThresholdCrossed{Balance: balOrg, Threshold: events.MustMoney("0.8"), Limit: events.MustMoney("100.5"),
		Used: events.MustMoney("80.4"), Unit: "USD", ReservationID: "rsv_01JDXKQ7ZC3V8M9N2P4R6T8W0Y", At: fixedAt}
	got, err := events.EncodeEvent(ev)
	require.NoError(t, err)
	b := golden(t, string(events.TypeThresholdCrossed)+".json", got)
	back, err := events.DecodeEvent(b)
	require.NoError(t, err)
	require.Equal(t, events.Event(ev), back)
	require.Equal(t, "org:acme/month/2026-11/0.8", events.AlertID(balOrg, ev.Threshold))
}

func TestCrossed(t *testing.T) {
	th, err := events.ParseThresholds([]string{"1", "0.5", "0.8"})
	require.NoError(t, err)
	m := events.MustMoney
	require.Empty(t, events.Crossed(th, nil, m("10"), m("4.99")))
	require.Equal(t, []events.Money{m("0.5")}, events.Crossed(th, nil, m("10"), m("5")))
	require.Equal(t, []events.Money{m("0.8"), m("1")}, events.Crossed(th, []events.Money{m("0.5")}, m("10"), m("10")))
	require.Empty(t, events.Crossed(th, th, m("10"), m("12")))
	require.Empty(t, events.Crossed(th, nil, m("0"), m("1")), "a zero limit crosses nothing")
}
