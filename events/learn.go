package events

import "fmt"

// LearnRule makes a budget reserve by observed cost instead of the
// maximum: for a request priced from a model, the Percentile-th
// percentile (nearest rank) of the actual cost of the last Window settled
// calls of the same model in the same scope, at least Floor and at most
// the priced maximum, which is the reservation's ceiling (what its settle
// may reach). Until MinSamples calls are known (cold start) it reserves
// the priced maximum. Package internal/learn computes it; a budget's
// exposure cap (BudgetDefinedV2.ExposureCap) bounds what the settles above
// learned reservations may add.
type LearnRule struct {
	// Percentile is from 1 to 100 (95: p95).
	Percentile int `json:"percentile"`
	// Window is how many recent settled calls count, 1 to MaxLearnWindow.
	Window int `json:"window"`
	// MinSamples is the cold start: the priced maximum is reserved until
	// this many calls are known, 1 to Window.
	MinSamples int `json:"min_samples"`
	// Floor is the least a learned reservation holds ("0": none).
	Floor Money `json:"floor"`
}

// Learned-reservation defaults and bounds.
const (
	DefaultLearnPercentile = 95
	DefaultLearnWindow     = 100
	DefaultLearnMinSamples = 20
	// MaxLearnWindow is the most settled calls a replica keeps per model
	// and scope, whatever the rules (so that what it keeps never depends
	// on a rule's history).
	MaxLearnWindow = 100
)

// DefaultLearnRule is p95 of the last 100 calls, priced maximum until 20
// are known, no floor.
func DefaultLearnRule() LearnRule {
	return LearnRule{Percentile: DefaultLearnPercentile, Window: DefaultLearnWindow, MinSamples: DefaultLearnMinSamples}
}

// Validate checks r's bounds (CodeInvalidRequest).
func (r LearnRule) Validate() error {
	switch {
	case r.Percentile < 1 || r.Percentile > 100:
		return Errorf(CodeInvalidRequest, "learn percentile %d must be from 1 to 100", r.Percentile)
	case r.Window < 1 || r.Window > MaxLearnWindow:
		return Errorf(CodeInvalidRequest, "learn window %d must be from 1 to %d", r.Window, MaxLearnWindow)
	case r.MinSamples < 1 || r.MinSamples > r.Window:
		return Errorf(CodeInvalidRequest, "learn min_samples %d must be from 1 to the window, %d", r.MinSamples, r.Window)
	case r.Floor.Sign() < 0:
		return Errorf(CodeInvalidAmount, "learn floor %s must not be negative", r.Floor)
	}
	return nil
}

// String is "p95 of 100, cold 20, floor 0.001".
func (r LearnRule) String() string {
	return fmt.Sprintf("p%d of %d, cold %d, floor %s", r.Percentile, r.Window, r.MinSamples, r.Floor)
}
