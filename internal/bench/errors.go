package bench

import "errors"

// Errors Run returns after the report when the run itself failed.
var (
	// ErrOverAdmission: a cap burst admitted past a limit.
	ErrOverAdmission = errors.New("over-admission")
	// ErrRequests: requests failed during the run (any of spendgate, the
	// floor, the naive baseline, the cap burst or the mem check).
	ErrRequests = errors.New("requests failed")
	// ErrMemOver: the mem check held more than its limit.
	ErrMemOver = errors.New("memory over the limit")
)
