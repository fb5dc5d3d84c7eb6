package events_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestWire_Golden freezes the wire shapes this package defines that
// callers parse: a refusal that concerns a reservation, a replayed admit,
// and a scope-only budget.get. Like the events, a released shape only
// grows: new fields are optional and omitted when empty.
func TestWire_Golden(t *testing.T) {
	exp := time.Date(2026, 11, 30, 12, 5, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		v    any
	}{
		{"wire/error.already_settled.json", events.ErrorReply{Error: events.ReservationErrorf(events.CodeAlreadySettled,
			"rsv_01a22a71-3a41-7d65-b6de-256be21c6fe4", events.StatusSettled,
			"reservation %s was already settled with actual 0.12; it cannot be released", "rsv_01a22a71-3a41-7d65-b6de-256be21c6fe4")}},
		{"wire/error.invalid_request.json", events.ErrorReply{Error: events.Errorf(events.CodeInvalidRequest,
			`amount must be a decimal string like "0.05", got a number`)}},
		{"wire/admit.replayed.json", events.AdmitReply{
			Admitted: true, RequestID: "req-42", ReservationID: "rsv_01a22a71-3a41-7d65-b6de-256be21c6fe4",
			Amount: "0.1", Unit: "USD", ExpiresAt: &exp, Status: events.StatusSettled, Replayed: true,
			Balances: []events.BalanceRef{{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}},
		}},
		{"wire/budget.get.scope.json", events.BudgetListReply{Budgets: []events.BudgetView{
			{Scope: "org:acme", Period: events.PeriodDay, Limit: "1", Unit: "USD", Instance: "2026-11-30",
				Spent: "0", Reserved: "0.1", Overrun: "0", Available: "0.9", Open: 1},
			{Scope: "org:acme", Period: events.PeriodMonth, Limit: "10", Unit: "USD", Instance: "2026-11",
				Spent: "0.12", Reserved: "0.1", Overrun: "0.02", Available: "9.78", Open: 1},
		}}},
		{"wire/admit.admitted.json", events.AdmitReply{
			Admitted: true, RequestID: "req-43", ReservationID: "rsv_01a22a71-3a41-7d65-b6de-256be21c6fe5",
			Amount: "0.1", Unit: "USD", ExpiresAt: &exp, Status: events.StatusOpen,
			Balances: []events.BalanceRef{
				{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"},
				{Scope: "user:u-17", Period: events.PeriodDay, Instance: "2026-11-30"},
			},
			Budgets: []events.BudgetUse{
				{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11", Unit: "USD", Limit: "10",
					Amount: "0.1", Spent: "0.12", Reserved: "0.2", Available: "9.68"},
				{Scope: "user:u-17", Period: events.PeriodDay, Instance: "2026-11-30", Unit: "requests", Limit: "100",
					Amount: "1", Spent: "3", Reserved: "1", Available: "96"},
			},
		}},
		{"wire/admit.check.json", events.AdmitReply{
			Admitted: true, RequestID: "req-44", Amount: "0.1", Unit: "USD", Mode: events.ModeCheck,
			Balances: []events.BalanceRef{{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}},
			Budgets: []events.BudgetUse{{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11", Unit: "USD",
				Limit: "10", Amount: "0.1", Spent: "0.12", Reserved: "0.2", Available: "9.68"}},
		}},
		{"wire/admit.denied.disabled.json", events.AdmitReply{
			RequestID: "req-45", Mode: events.ModeShadow, Denial: &events.Denial{
				Reason: events.ReasonBudgetDisabled, Message: "budget org:acme per month is disabled",
				Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11", Unit: "USD",
				Limit: "10", Spent: "0.12", Reserved: "0.1", Requested: "0.1",
			},
		}},
		{"wire/budget.put.changed.json", events.BudgetPutReply{
			BudgetView: events.BudgetView{Scope: "org:acme", Period: events.PeriodWeek, Limit: "5", Unit: "USD",
				Instance: "2026-W49", Spent: "0", Reserved: "0", Overrun: "0", Available: "5", Open: 0,
				TZ: "Europe/Berlin", Disabled: true},
			Changed:  []string{"limit", "tz", "disabled"},
			Previous: &events.BudgetDefinition{Limit: "100", Unit: "USD"},
		}},
		{"wire/budget.put.created.json", events.BudgetPutReply{
			BudgetView: events.BudgetView{Scope: "org:acme", Period: events.PeriodMonth, Limit: "100", Unit: "USD",
				Instance: "2026-11", Spent: "0", Reserved: "0", Overrun: "0", Available: "100", Open: 0},
			Created: true, Changed: []string{},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(tc.v)
			require.NoError(t, err)
			golden(t, tc.name, got)
		})
	}
	// The error's cause never goes on the wire.
	e := events.ReservationErrorf(events.CodeAlreadyReleased, "rsv_1", events.StatusReleased, "released")
	e.Err = errors.New("secret cause")
	b, err := json.Marshal(events.ErrorReply{Error: e})
	require.NoError(t, err)
	require.NotContains(t, string(b), "secret")
}
