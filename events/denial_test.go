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

// TestAdmitChecked_Golden freezes admit.checked.v1 and decodes it back:
// a shadow admit that would have been denied, and a check that would have
// been admitted.
func TestAdmitChecked_Golden(t *testing.T) {
	c := events.AdmitChecked{At: fixedAt, Replica: "r1", Tenant: "acme", Mode: events.ModeShadow, RequestID: "req-1",
		Scopes: []string{"team:search"}, Amount: "2.5", Model: "gpt-x", Unit: "USD", Metadata: map[string]string{"feature": "summarize"},
		Denial: &events.Denial{Reason: events.ReasonLimitReached, Message: "over", Scope: "team:search", Period: events.PeriodMonth,
			Instance: "2026-11", Unit: "USD", Limit: "10", Spent: "9", Reserved: "0", Requested: "2.5"}}
	got, err := events.EncodeAdmitChecked(c)
	require.NoError(t, err)
	b := golden(t, string(events.TypeAdmitChecked)+".json", got)
	back, err := events.DecodeAdmitChecked(b)
	require.NoError(t, err)
	c.Type = events.TypeAdmitChecked
	require.Equal(t, c, back)
	require.Equal(t, events.ReasonLimitReached, back.Reason())

	ok := events.AdmitChecked{At: fixedAt, Replica: "r1", Mode: events.ModeCheck, RequestID: "req-2", Scopes: []string{"user:bob"}, Admitted: true, Amount: "1", Unit: "USD"}
	got, err = events.EncodeAdmitChecked(ok)
	require.NoError(t, err)
	back, err = events.DecodeAdmitChecked(got)
	require.NoError(t, err)
	require.True(t, back.Admitted)
	require.Equal(t, events.Code(""), back.Reason())

	// A denial record is not a check record, nor the other way round.
	_, err = events.DecodeAdmitDenied(got)
	require.Equal(t, events.CodeInvalidRequest, events.CodeOf(err))
	for _, bad := range []string{`{}`, `{"type":"admit.checked.v1","mode":"shadow","x":1}`, `{"type":"admit.checked.v1","mode":"admit"}`,
		`{"type":"admit.checked.v1","mode":"check"}{}`, `{"type":"admit.denied.v1","mode":"check"}`} {
		_, err := events.DecodeAdmitChecked([]byte(bad))
		require.Equal(t, events.CodeInvalidRequest, events.CodeOf(err), bad)
	}
}
