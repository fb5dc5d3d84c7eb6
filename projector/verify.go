package projector

import (
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/streams"
)

// seedHeads gives v's gate the heads of the keys a State loaded from a
// snapshot holds (lanes, budgets, prices, defaults), so the tail after
// the snapshot is chain-checked from them.
func (s *State) seedHeads(v *verifier) {
	for key, seq := range s.lanes {
		v.h.Set(key, gate.Head{Valid: seq, Hash: s.hashes[key], Chained: true})
	}
	for ref, b := range s.budgets {
		key := streams.BudgetKey(ref)
		v.h.Set(key, gate.Head{Valid: b.Revision, Hash: s.hashes[key], Chained: true})
	}
	for key, seq := range s.defaultRev {
		v.h.Set(key, gate.Head{Valid: seq, Hash: s.hashes[key], Chained: true})
	}
	for model, seq := range s.pricing.current {
		key := streams.PricingKey(model)
		v.h.Set(key, gate.Head{Valid: seq, Hash: s.hashes[key], Chained: true})
	}
}
