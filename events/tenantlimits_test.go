package events_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestTenantLimitsDefined_Golden freezes tenant.limits.defined.v1 and its
// tenantlimits.v1 revision: a value set, a value of 0 (no limit) and
// values left out (the common limit) are three different things on the
// wire.
func TestTenantLimitsDefined_Golden(t *testing.T) {
	open, off := int64(50000), int64(0)
	ev := events.TenantLimitsDefined{Tenant: "acme", TenantLimitValues: events.TenantLimitValues{MaxOpen: &open, DenialBytes: &off},
		Changed: []string{"max_open", "rate"}, At: fixedAt}
	got, err := events.EncodeEvent(ev)
	require.NoError(t, err)
	b := golden(t, string(events.TypeTenantLimitsDefined)+".json", got)
	back, err := events.DecodeEvent(b)
	require.NoError(t, err)
	require.Equal(t, events.Event(ev), back)

	rev := events.TenantLimitsRevision{Schema: events.SchemaTenantLimits, Chain: events.Chain{Prev: 16, PrevHash: events.HashPayload([]byte("revision 16"))},
		Tenant: "acme", TenantLimitValues: ev.TenantLimitValues, Events: events.Events{ev}}
	got, err = json.Marshal(rev)
	require.NoError(t, err)
	b = golden(t, events.SchemaTenantLimits+".json", got)
	backRev, err := events.DecodeTenantLimitsRevision(b)
	require.NoError(t, err)
	require.Equal(t, rev, backRev)
}

// TestTenantLimitValues: Validate's bounds, and Changes telling a value
// left out from a value of 0.
func TestTenantLimitValues(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	for _, bad := range []events.TenantLimitValues{
		{MaxOpen: n(-1)}, {Rate: n(events.MaxTenantLimit + 1)}, {Burst: n(0)}, {DenialBytes: n(-5)},
	} {
		err := bad.Validate()
		require.Error(t, err)
		require.Equal(t, events.CodeInvalidRequest, err.(*events.Error).Code)
	}
	require.NoError(t, events.TenantLimitValues{MaxOpen: n(0), Rate: n(events.MaxTenantLimit), Burst: n(1)}.Validate())
	require.NoError(t, events.TenantLimitValues{}.Validate())

	a := events.TenantLimitValues{MaxOpen: n(0), Rate: n(5)}
	require.Equal(t, []string{"max_open"}, a.Changes(events.TenantLimitValues{Rate: n(5)}), "0 is not left out")
	require.Equal(t, []string{"rate"}, a.Changes(events.TenantLimitValues{MaxOpen: n(0), Rate: n(6)}))
	require.Equal(t, []string{}, a.Changes(a.Clone()))
	c := a.Clone()
	*c.Rate = 7
	require.Equal(t, int64(5), *a.Rate, "Clone copies the values")

	_, err := events.DecodeTenantLimitsRevision([]byte(`{"schema":"tenantlimits.v1","tenant":"acme","max_open":-3,"events":[]}`))
	require.Error(t, err, "a revision with a value out of bounds does not decode")
	_, err = events.DecodeTenantLimitsRevision([]byte(`{"schema":"tenantlimits.v1","tenant":"a.b","events":[]}`))
	require.Error(t, err, "nor one of a tenant that is not a subject token")
}
