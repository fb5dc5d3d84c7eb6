package projector

import "github.com/spendgate/spendgate/events"

// applyCrossed folds a threshold crossing into b: the threshold is a
// fraction in (0, 1] not crossed before in the balance, and it is crossed
// where the event says, at the balance's spent + reserved as folded so far
// in the revision, which reaches threshold x limit. A crossing of a later
// arm generation (the budget's limit, unit, zone or thresholds changed)
// forgets the crossings of the earlier one; one of an earlier generation
// than the balance's is refused.
func applyCrossed(b *Balance, ev events.ThresholdCrossed) error {
	if err := checkBalance(b, ev.Balance); err != nil {
		return err
	}
	if ev.Threshold.Sign() <= 0 || ev.Threshold.Cmp(events.MoneyFromInt(1)) > 0 {
		return errorf(ErrMalformed, "threshold %s is not a fraction in (0, 1]", ev.Threshold)
	}
	switch {
	case ev.Arm < b.Arm:
		return errorf(ErrTransition, "threshold %s crossed in arm generation %d after generation %d in %s", ev.Threshold, ev.Arm, b.Arm, b.Ref)
	case ev.Arm > b.Arm:
		b.Alerted, b.Arm = nil, ev.Arm
	}
	for _, a := range b.Alerted {
		if a.Cmp(ev.Threshold) == 0 {
			return errorf(ErrInvariant, "threshold %s crossed twice in %s", ev.Threshold, b.Ref)
		}
	}
	used := b.Spent.Add(b.Reserved)
	if ev.Used.Cmp(used) != 0 {
		return errorf(ErrTransition, "threshold %s states used %s, but the balance holds %s", ev.Threshold, ev.Used, used)
	}
	if used.Cmp(ev.Threshold.Mul(ev.Limit)) < 0 {
		return errorf(ErrTransition, "threshold %s of limit %s crossed at used %s, below it", ev.Threshold, ev.Limit, used)
	}
	b.Alerted = append(b.Alerted[:len(b.Alerted):len(b.Alerted)], ev.Threshold)
	return nil
}
