package events_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// An alert encodes and decodes to itself; a message that is not an alert
// (another type, an unknown kind or field, no id) is refused with
// invalid_request.
func TestAlert_EncodeDecode(t *testing.T) {
	b := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-12"}
	a := events.ThresholdAlert(events.ThresholdCrossed{Balance: b, Threshold: events.MustMoney("0.5"), Limit: events.MustMoney("10"),
		Used: events.MustMoney("5"), Unit: "USD", ReservationID: "rsv_1", At: time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC), Arm: 3})
	require.Equal(t, "org:acme/month/2026-12/0.5/arm3", a.ID)
	data, err := events.EncodeAlert(a)
	require.NoError(t, err)
	got, err := events.DecodeAlert(data)
	require.NoError(t, err)
	require.Equal(t, a.ID, got.ID)
	require.Equal(t, "0.5", got.Threshold.String())
	require.Equal(t, uint64(3), got.Arm)
	require.Equal(t, "org:acme per month (2026-12): 50% of the limit reached - 5 of 10 USD used", got.Summary())
	for _, bad := range []string{
		`{"type":"threshold.crossed.v1","id":"x","kind":"threshold"}`,
		`{"type":"alert.v1","id":"x","kind":"loud"}`,
		`{"type":"alert.v1","kind":"blocking"}`,
		`{"type":"alert.v1","id":"x","kind":"blocking","extra":1}`,
		`{"type":"alert.v1","id":"x","kind":"blocking"} {}`,
	} {
		_, err := events.DecodeAlert([]byte(bad))
		var e *events.Error
		require.ErrorAs(t, err, &e, bad)
		require.Equal(t, events.CodeInvalidRequest, e.Code, bad)
	}
	require.True(t, events.ArmingChange([]string{"disabled", "tz"}))
	require.False(t, events.ArmingChange([]string{"disabled", "fixed_slot"}))
}
