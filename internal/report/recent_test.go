package report_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/report"
)

// One tenant denied in a loop does not push another's recent denials out:
// each tenant keeps its newest. How we know it can fail: with one ring for
// all (the build before), 300 of globex's denials after acme's 50 left
// none of acme's.
func TestDenialRing_TenantsKeptApart(t *testing.T) {
	var r report.DenialRing
	require.Empty(t, r.Newest())
	for i := range 50 {
		r.Add(events.AdmitDenied{Tenant: "acme", RequestID: fmt.Sprint("a", i)})
	}
	for i := range 10 {
		r.Add(events.AdmitDenied{RequestID: fmt.Sprint("u", i)})
	}
	for i := range 300 {
		r.Add(events.AdmitDenied{Tenant: "globex", RequestID: fmt.Sprint("g", i)})
	}
	by := map[string][]string{}
	for _, d := range r.Newest() {
		by[d.Tenant] = append(by[d.Tenant], d.RequestID)
	}
	require.Len(t, by["acme"], 50)
	require.Equal(t, "a49", by["acme"][0], "newest first")
	require.Len(t, by[""], 10)
	require.Len(t, by["globex"], report.RecentDenialsPerTenant, "its own newest, bounded")
	require.Equal(t, "g299", by["globex"][0])
	require.Equal(t, fmt.Sprint("g", 300-report.RecentDenialsPerTenant), by["globex"][report.RecentDenialsPerTenant-1])
	require.Equal(t, "g299", r.Newest()[0].RequestID, "merged newest first")

	// The untenanted deployment keeps RecentDenialsSize.
	for i := range report.RecentDenialsSize + 5 {
		r.Add(events.AdmitDenied{RequestID: fmt.Sprint("v", i)})
	}
	n := 0
	for _, d := range r.Newest() {
		if d.Tenant == "" {
			n++
		}
	}
	require.Equal(t, report.RecentDenialsSize, n)

	// Past RecentDenialTenants tenants the stalest is forgotten (acme's
	// newest is the oldest of all), never the untenanted deployment.
	for i := range report.RecentDenialTenants - 1 {
		r.Add(events.AdmitDenied{Tenant: fmt.Sprint("t", i), RequestID: "x"})
	}
	tenants := map[string]bool{}
	for _, d := range r.Newest() {
		tenants[d.Tenant] = true
	}
	require.False(t, tenants["acme"], "the stalest tenant was forgotten")
	require.True(t, tenants["globex"])
	require.True(t, tenants[""])
	require.Len(t, tenants, report.RecentDenialTenants+1)
}
