package events_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestAdmitDenied_Golden freezes admit.denied.v1 and decodes it back.
func TestAdmitDenied_Golden(t *testing.T) {
	d := events.AdmitDenied{At: fixedAt, Replica: "r1", Tenant: "acme", RequestID: "req-1",
		Scopes: []string{"org:acme", "team:search"}, Amount: "2.5", Model: "gpt-x", Unit: "USD", Metadata: map[string]string{"model": "gpt-x"},
		Denial: events.Denial{Reason: events.ReasonLimitReached, Message: "over", Scope: "team:search", Period: events.PeriodMonth,
			Instance: "2026-11", Unit: "USD", Limit: "10", Spent: "9", Reserved: "0", Requested: "2.5"}}
	got, err := events.EncodeAdmitDenied(d)
	require.NoError(t, err)
	b := golden(t, string(events.TypeAdmitDenied)+".json", got)
	back, err := events.DecodeAdmitDenied(b)
	require.NoError(t, err)
	d.Type = events.TypeAdmitDenied
	require.Equal(t, d, back)
	require.Equal(t, []events.Scope{"acme/org:acme", "acme/team:search"}, back.StoredScopes())

	for _, bad := range []string{`{}`, `{"type":"admit.denied.v1","x":1}`, `{"type":"admit.denied.v1"}{}`, `[]`} {
		_, err := events.DecodeAdmitDenied([]byte(bad))
		require.Equal(t, events.CodeInvalidRequest, events.CodeOf(err), bad)
	}
}
