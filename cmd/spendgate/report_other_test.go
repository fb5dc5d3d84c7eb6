package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/report"
)

// A tenant's live report by scope names its scopes as stored (acme/...),
// a scope kind's Other group (run:*, "other": true) too, and the one Other
// group ("", "other": true) shows as (other) in the table.
//
// How it can fail: with every Other group printed as (other), as when
// there was one, the table does not say which kind's scopes run:* sums;
// with the Other groups left as the tenant names them, it prints run:*
// where the replay prints acme/run:*.
func TestReportOf_OtherGroups(t *testing.T) {
	t.Parallel()
	g := func(value string, other bool, spend string) events.ReportGroup {
		return events.ReportGroup{Value: value, Other: other, Unit: "USD", Reservations: 1, Settled: 1,
			Spend: spend, Overrun: "0", Reserved: "0"}
	}
	reply := events.ReportReply{By: "scope", Position: 9, Groups: []events.ReportGroup{
		g("run:*", true, "5.25"), g("org:globex", false, "2.75"), g("", true, "1")}}
	storedScopes("acme", &reply)
	rep, err := reportOf(report.ByScope, report.Filter{}, reply)
	require.NoError(t, err)
	var values []string
	for _, g := range rep.Groups {
		values = append(values, g.Value)
	}
	require.Equal(t, []string{"acme/run:*", "acme/org:globex", "(other)"}, values)
	var out bytes.Buffer
	require.NoError(t, writeReportTable(&out, "scope", replayFlags{}, rep))
	require.Contains(t, out.String(), "\nacme/run:*        USD             1     0        1         0        0     0   5.25")
	require.Contains(t, out.String(), "\n(other)           USD             1     0        1         0        0     0      1")
}
