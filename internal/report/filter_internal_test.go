package report

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestFilter_Tenant: OneTenant keeps one tenant's reservations ("" the
// untenanted deployment's); without it, every tenant's.
func TestFilter_Tenant(t *testing.T) {
	opened := func(scope events.Scope) events.ReservationOpened {
		ref := events.BalanceRef{Scope: scope, Period: events.PeriodDay, Instance: "2026-11-30"}
		return events.ReservationOpened{Balance: ref, Balances: []events.BalanceRef{ref}}
	}
	acme, plain := opened("acme/team:search"), opened("team:search")
	require.True(t, Filter{}.selects(acme))
	require.True(t, Filter{}.selects(plain))
	require.True(t, Filter{OneTenant: true, Tenant: "acme"}.selects(acme))
	require.False(t, Filter{OneTenant: true, Tenant: "acme"}.selects(plain))
	require.False(t, Filter{OneTenant: true, Tenant: "globex"}.selects(acme))
	require.True(t, Filter{OneTenant: true}.selects(plain))
	require.False(t, Filter{OneTenant: true}.selects(acme))
	require.False(t, Filter{OneTenant: true, Tenant: "acme", Scopes: []events.Scope{"team:search"}}.selects(acme))
	require.True(t, Filter{OneTenant: true, Tenant: "acme", Scopes: []events.Scope{"acme/team:search"}}.selects(acme))
}
