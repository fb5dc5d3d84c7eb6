package projector

import (
	"fmt"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// applyDefault folds one default revision: its chain, its
// default.defined.v1 events, and that it states what they define.
func (s *State) applyDefault(seq uint64, key string, data []byte) error {
	var rev events.DefaultRevision
	if err := decodeStrict(data, &rev); err != nil {
		return err
	}
	if rev.Schema != events.SchemaDefault {
		return errorf(ErrMalformed, "schema %q under a default key", rev.Schema)
	}
	if _, err := events.ParseStoredScope(rev.Kind + ":x"); err != nil {
		return errorf(ErrMalformed, "kind: %v", err)
	}
	if _, err := events.ParsePeriod(string(rev.Period)); err != nil {
		return errorf(ErrMalformed, "%v", err)
	}
	if want := streams.DefaultKey(rev.Kind, rev.Period); want != key {
		return errorf(ErrMalformed, "revision of default %s/%s belongs under key %s", rev.Kind, rev.Period, want)
	}
	if len(rev.Events) == 0 {
		return errorf(ErrMalformed, "default revision without a DefaultDefined event")
	}
	if err := events.CheckChain(key, seq, rev.Chain, s.defaultRev[key], s.hashes[key]); err != nil {
		return fmt.Errorf("%w: %w", ErrChain, err)
	}
	var b *Budget
	for i, e := range rev.Events {
		ev, ok := e.(events.DefaultDefined)
		if !ok {
			return errorf(ErrMalformed, "event %d (%s): not a default definition in a default revision", i, eventType(e))
		}
		if ev.Kind != rev.Kind || ev.Period != rev.Period {
			return errorf(ErrMalformed, "event %d (%s): default %s/%s differs from the revision's", i, eventType(e), ev.Kind, ev.Period)
		}
		if ev.Limit.Sign() < 0 {
			return errorf(ErrMalformed, "event %d (%s): negative limit %s", i, eventType(e), ev.Limit)
		}
		if err := events.ValidateUnit(ev.Unit); err != nil {
			return errorf(ErrMalformed, "event %d (%s): %v", i, eventType(e), err)
		}
		if _, err := events.LoadZone(ev.TZ); err != nil {
			return errorf(ErrMalformed, "event %d (%s): %v", i, eventType(e), err)
		}
		b = &Budget{Ref: events.BudgetRef{Period: ev.Period}, Limit: ev.Limit, Unit: ev.Unit, TZ: ev.TZ, Disabled: ev.Disabled,
			FixedSlot: ev.FixedSlot, Thresholds: ev.Thresholds, ExposureCap: ev.ExposureCap, Learn: ev.Learn, DefinedAt: ev.At, Revision: seq}
	}
	if rev.Limit.Cmp(b.Limit) != 0 || rev.Unit != b.Unit || rev.TZ != b.TZ || rev.Disabled != b.Disabled ||
		slotString(rev.FixedSlot) != slotString(b.FixedSlot) || moneyList(rev.Thresholds) != moneyList(b.Thresholds) ||
		slotString(rev.ExposureCap) != slotString(b.ExposureCap) || learnString(rev.Learn) != learnString(b.Learn) {
		return &MismatchError{Field: "definition", Stated: fmt.Sprintf("%s %s", rev.Limit, rev.Unit), Folded: fmt.Sprintf("%s %s", b.Limit, b.Unit)}
	}
	if s.defaults[key] == nil {
		s.defaults[key] = map[uint64]*Budget{}
	}
	s.defaults[key][seq] = b
	s.defaultRev[key] = seq
	s.hashes[key] = events.HashPayload(data)
	s.events += len(rev.Events)
	return nil
}

// checkFromDefault checks a budget definition created from a default: the
// default revision it names exists for the budget's kind and period, and
// the definition is that default's (its exposure cap and learn rule
// included).
func (s *State) checkFromDefault(ref events.BudgetRef, ev events.BudgetDefinedV2, seq uint64) error {
	d := s.defaults[streams.DefaultKey(ref.Scope.Kind(), ref.Period)][ev.FromDefault]
	if d == nil {
		return errorf(ErrTransition, "budget %s/%s names default revision %d, which the ledger never defined for kind %s", ref.Scope, ref.Period, ev.FromDefault, ref.Scope.Kind())
	}
	if ev.Limit.Cmp(d.Limit) != 0 || ev.Unit != d.Unit || ev.TZ != d.TZ || ev.Disabled != d.Disabled ||
		slotString(ev.FixedSlot) != slotString(d.FixedSlot) || moneyList(ev.Thresholds) != moneyList(d.Thresholds) ||
		slotString(ev.ExposureCap) != slotString(d.ExposureCap) || learnString(ev.Learn) != learnString(d.Learn) {
		return errorf(ErrTransition, "budget %s/%s at %d differs from the default revision %d it names", ref.Scope, ref.Period, seq, ev.FromDefault)
	}
	return nil
}
