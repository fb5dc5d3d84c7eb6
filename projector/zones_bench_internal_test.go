package projector

import (
	"testing"
	"time"

	"github.com/spendgate/spendgate/events"
)

// BenchmarkNoteZone is what recording a balance's zone adds to the fold
// of each admit (the audit replays every one), against the fold of the
// admit's balance numbers it rides on, for a zone other than UTC.
//
//	go test -run '^$' -bench BenchmarkNoteZone ./projector/
func BenchmarkNoteZone(b *testing.B) {
	s := NewState()
	ref := events.BudgetRef{Scope: "team:nz", Period: events.PeriodMonth}
	s.budgets[ref] = &Budget{Ref: ref, TZ: "Pacific/Auckland"}
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	bal := Balance{Ref: events.BalanceRef{Scope: ref.Scope, Period: ref.Period, Instance: "2026-12"}}
	ev := events.ReservationOpened{Balance: bal.Ref, At: at}
	b.ReportAllocs()
	for b.Loop() {
		s.noteZone(&bal, ev)
	}
	if len(bal.Zones) != 1 || bal.Zones[0] != "Pacific/Auckland" {
		b.Fatalf("zones %v", bal.Zones)
	}
}
