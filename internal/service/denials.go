package service

import (
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/report"
)

// DenialRingSize bounds the recent denials of the untenanted deployment a
// replica keeps in memory (each tenant's: report.RecentDenialsPerTenant).
const DenialRingSize = report.RecentDenialsSize

// RecentDenials returns the newest admits this replica denied, each
// tenant's kept apart (report.DenialRing), newest first: the records it appends to the denial stream. Denials are
// not in the ledger (nothing was written), so other replicas' are not
// included (the report aggregator's RecentDenials has every replica's).
func (s *Service) RecentDenials() []events.AdmitDenied { return s.denials.Newest() }
