package client_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
)

// A denial's text says each thing once: the service's message names the
// scope and period, so Error adds them only when the message does not
// (an earlier build's text read "limit_reached in user:u-17 per day:
// user:u-17 per day: spent ...").
func TestDeniedError_Error(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		denial events.Denial
		want   string
	}{{
		name: "the message names the scope and period",
		denial: events.Denial{Reason: events.ReasonLimitReached, Scope: "user:u-17", Period: events.PeriodDay,
			Message: "user:u-17 per day: spent 0 + reserved 0 + requested 0.5 exceeds the limit 0.1 USD"},
		want: "spendgate: admit req-7 denied: limit_reached: user:u-17 per day: spent 0 + reserved 0 + requested 0.5 exceeds the limit 0.1 USD",
	}, {
		name: "a tenant's scope, named locally in the message",
		denial: events.Denial{Reason: events.ReasonBudgetDisabled, Scope: "acme/team:x", Period: events.PeriodMonth,
			Message: "budget team:x per month is disabled"},
		want: "spendgate: admit req-7 denied: budget_disabled: budget team:x per month is disabled",
	}, {
		name:   "no message",
		denial: events.Denial{Reason: events.ReasonLimitReached, Scope: "org:acme", Period: events.PeriodMonth},
		want:   "spendgate: admit req-7 denied: limit_reached in org:acme per month",
	}, {
		name:   "a message that does not name the scope",
		denial: events.Denial{Reason: events.ReasonLimitReached, Scope: "org:acme", Period: events.PeriodMonth, Message: "over"},
		want:   "spendgate: admit req-7 denied: limit_reached in org:acme per month: over",
	}, {
		name:   "fail closed: no scope",
		denial: events.Denial{Reason: events.ReasonLedgerUnavailable, Message: "the ledger could not answer; denied (fail closed)"},
		want:   "spendgate: admit req-7 denied: ledger_unavailable: the ledger could not answer; denied (fail closed)",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			err := &client.DeniedError{RequestID: "req-7", Denial: tc.denial}
			require.Equal(t, tc.want, err.Error())
			if s := string(tc.denial.Scope.Local()); s != "" {
				require.Equal(t, 1, strings.Count(err.Error(), s), "the scope once")
			}
			require.True(t, errors.Is(err, client.ErrDenied))
		})
	}
}
