package streams_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Each alert has a subject of its own, under the alert filter, that
// encodes its id: a threshold's point, a tenant, a unit and the arm
// generation all make it differ.
func TestLayout_AlertMsgSubject(t *testing.T) {
	l := streams.Default()
	at := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	b := events.BalanceRef{Scope: "team:search", Period: events.PeriodMonth, Instance: "2026-12"}
	th := events.ThresholdAlert(events.ThresholdCrossed{Balance: b, Threshold: events.MustMoney("0.8"), Limit: events.MustMoney("10"), Used: events.MustMoney("8"), At: at})
	require.Equal(t, "spendgate.alert.v1.team.search.month.2026-12._.0_8.0", l.AlertMsgSubject(th))
	bl := events.BlockingAlert(b, "USD", events.MustMoney("10"), events.MustMoney("9.8"), "1", "r1", 41, at)
	require.Equal(t, "spendgate.alert.v1.team.search.month.2026-12._.blocking.41", l.AlertMsgSubject(bl))
	tb := events.BalanceRef{Scope: "acme/user:u1", Period: events.PeriodDay, Instance: "2026-12-02", Unit: "requests"}
	tt := events.ThresholdAlert(events.ThresholdCrossed{Balance: tb, Threshold: events.MustMoney("1"), At: at, Arm: 7})
	require.Equal(t, "spendgate.alert.v1.t.acme.user.u1.day.2026-12-02.requests.1.7", l.AlertMsgSubject(tt))
	require.Equal(t, "acme", tt.Tenant)
	require.Equal(t, "acme/user:u1/day/2026-12-02/requests/1/arm7", tt.ID)
	require.Equal(t, "spendgate.alert.v1.>", l.AlertFilter())
	cfg := l.AlertStreamConfig()
	require.Equal(t, "spendgate_alerts", cfg.Name)
	require.Equal(t, []string{l.AlertFilter()}, cfg.Subjects)
	require.LessOrEqual(t, cfg.Duplicates, cfg.MaxAge)
}
