package service

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/logbound"
	"github.com/spendgate/spendgate/internal/metrics"
)

// countHandler counts the records it handles by message.
type countHandler struct {
	mu sync.Mutex
	n  map[string]int
	// held is the "failed" attribute of the last summary line.
	held int64
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[r.Message]++
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "failed" {
			h.held = a.Value.Int64()
		}
		return true
	})
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }

func (h *countHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg]
}

// TestEncode_FailedRequestsLogBounded: requests answered
// ledger_unavailable (the ledger stream out of disk, its server gone) are
// logged one by one up to logbound.DefaultBurst a minute, and the rest summed up
// in one line once the minute is over; each is still counted in
// spendgate_requests_total. How we know it can fail: with a line per
// failed request, as before, 100 failures are 100 lines (22,000 in 45 s
// on a full disk under load).
func TestEncode_FailedRequestsLogBounded(t *testing.T) {
	now := time.Date(2026, 12, 6, 19, 8, 25, 0, time.UTC)
	logs := &countHandler{}
	s := &Service{m: metrics.New(metrics.BuildInfo{}), log: slog.New(logs), now: func() time.Time { return now }}
	fail := func() {
		err := events.Errorf(events.CodeLedgerUnavailable, "writing to the ledger stream")
		_, e := s.encode(nil, "admit", "spendgate.admit", nil, err, now, now)
		require.Equal(t, events.CodeLedgerUnavailable, e.Code)
	}
	for range 100 {
		fail()
	}
	require.Equal(t, logbound.DefaultBurst, logs.count("request failed"))
	summary := "more requests failed; not logged one by one (past the first 20 a minute, summed up once a minute; spendgate_requests_total counts each by endpoint and code)"
	require.Zero(t, logs.count(summary))
	now = now.Add(logbound.Every)
	fail()
	require.Equal(t, 1, logs.count(summary))
	require.EqualValues(t, 100-logbound.DefaultBurst, logs.held)
	require.Equal(t, logbound.DefaultBurst+1, logs.count("request failed"))
}
