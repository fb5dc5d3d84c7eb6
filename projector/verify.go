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

// late prepares s to fold m when m passed late (see readVerified): the
// State folds in stream order, so its position is moved back to just
// before m for the fold, and the returned func puts it back where it was.
// For any other message it does nothing.
func (s *State) late(m message) func() {
	if !m.late || m.seq > s.position {
		return func() {}
	}
	pos := s.position
	s.position = m.seq - 1
	return func() { s.position = max(pos, s.position) }
}

// applyPassed folds a message the gate passed into st: as a replica folds
// it, a revision the projector's own reading refuses (it does not decode,
// or breaks its key's chain by the projector's count) is skipped.
func applyPassed(st *State, m message) error {
	defer st.late(m)()
	return applySkipping(st, m)
}
