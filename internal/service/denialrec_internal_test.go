package service

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// TestDenialRecorder_UnknownBudgetFloodIsBounded: the untenanted
// deployment's denials of budgets it does not have share one bound of
// bytes per second, so a caller making scope names up as fast as it can
// leaves room in the buffer for the denials of real budgets, which are
// never bounded. Without the bound every one of the 2,000 made-up names
// is buffered (the first require fails), and with a buffer of the
// default size the real denials after them are dropped.
func TestDenialRecorder_UnknownBudgetFloodIsBounded(t *testing.T) {
	r, err := NewDenialRecorder(nil, streams.Layout{}, "r1", 10_000, nil)
	require.NoError(t, err)
	const perSecond = 1024 // a burst of 16 KiB
	r.LimitTenantBytes(perSecond, nil, nil)

	junk := func(i int) events.AdmitDenied {
		return events.AdmitDenied{Type: events.TypeAdmitDenied, RequestID: "junk-" + strconv.Itoa(i),
			Scopes: []string{"made-up-" + strconv.Itoa(i)}, Amount: "1",
			Metadata: map[string]string{"pad": string(make([]byte, 200))},
			Denial:   events.Denial{Reason: events.ReasonUnknownBudget}}
	}
	buffered := 0
	for i := range 2000 {
		if r.Record(junk(i)) {
			buffered++
		}
	}
	// At least a few hundred bytes each: 16 KiB of burst (plus what came
	// back during the loop) holds well under 2,000 of them.
	require.Less(t, buffered, 500, "unknown_budget denials of the untenanted deployment are bounded")
	require.Positive(t, buffered, "within the bound they are recorded")
	require.Equal(t, uint64(2000-buffered), r.Limited())

	// The denials of real budgets are not bounded.
	for i := range 2000 {
		d := events.AdmitDenied{Type: events.TypeAdmitDenied, RequestID: "real-" + strconv.Itoa(i), Scopes: []string{"team:a"},
			Amount: "1", Metadata: map[string]string{"pad": string(make([]byte, 200))},
			Denial: events.Denial{Reason: events.ReasonLimitReached, Scope: "team:a"}}
		require.True(t, r.Record(d), "denial %d of a real budget", i)
	}
	require.Equal(t, uint64(2000-buffered), r.Limited(), "none of them limited")
	require.Zero(t, r.Dropped())
}

// TestDenialRecorder_TenantChecksAreBounded: a tenant's check and shadow
// answers (admits sent with "mode": "check", which reserve nothing and are
// recorded on the denial stream) take their bytes from the tenant's
// bound, as its denials do, and so do the untenanted deployment's checks
// denied for a budget it does not have; the untenanted checks of real
// budgets are not bounded. Without the bound a tenant sending checks with
// made-up scope names and 4 KB of metadata filled the denial stream at
// its request rate (25 MB in 10 s on one replica, against 16 KiB/s): every
// one of the 2,000 here is buffered and the first require fails.
func TestDenialRecorder_TenantChecksAreBounded(t *testing.T) {
	r, err := NewDenialRecorder(nil, streams.Layout{}, "r1", 10_000, nil)
	require.NoError(t, err)
	const perSecond = 1024 // a burst of 16 KiB
	var limitedTenants []string
	r.LimitTenantBytes(perSecond, nil, func(tenant string) { limitedTenants = append(limitedTenants, tenant) })

	check := func(tenant, id string, denial *events.Denial) events.AdmitChecked {
		return events.AdmitChecked{Type: events.TypeAdmitChecked, Tenant: tenant, Mode: events.ModeCheck, RequestID: id,
			Scopes: []string{"made-up:" + id}, Admitted: denial == nil, Amount: "1",
			Metadata: map[string]string{"pad": string(make([]byte, 200))}, Denial: denial}
	}
	buffered := 0
	for i := range 2000 {
		if r.RecordCheck(check("acme", "c-"+strconv.Itoa(i), nil)) {
			buffered++
		}
	}
	require.Less(t, buffered, 500, "a tenant's check answers are bounded")
	require.Positive(t, buffered, "within the bound they are recorded")
	require.Equal(t, uint64(2000-buffered), r.Limited())
	require.NotEmpty(t, limitedTenants)
	require.Equal(t, "acme", limitedTenants[0])

	untenantedUnknown := 0
	for i := range 2000 {
		if r.RecordCheck(check("", "u-"+strconv.Itoa(i), &events.Denial{Reason: events.ReasonUnknownBudget})) {
			untenantedUnknown++
		}
	}
	require.Less(t, untenantedUnknown, 500, "the untenanted checks denied unknown_budget are bounded")

	limited := r.Limited()
	for i := range 2000 {
		require.True(t, r.RecordCheck(check("", "real-"+strconv.Itoa(i), nil)), "untenanted check %d of a real budget", i)
	}
	require.Equal(t, limited, r.Limited(), "none of them limited")
	require.Zero(t, r.Dropped())
}
