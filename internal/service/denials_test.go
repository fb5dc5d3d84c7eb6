package service

import (
	"strconv"
	"testing"

	"github.com/spendgate/spendgate/events"
	"github.com/stretchr/testify/require"
)

// The ring keeps the last DenialRingSize denials, newest first.
func TestService_RecentDenials(t *testing.T) {
	t.Parallel()
	var s Service
	require.Empty(t, s.RecentDenials())
	for i := range DenialRingSize + 10 {
		s.denials.Add(events.AdmitDenied{RequestID: strconv.Itoa(i)})
	}
	got := s.RecentDenials()
	require.Len(t, got, DenialRingSize)
	require.Equal(t, strconv.Itoa(DenialRingSize+9), got[0].RequestID)
	require.Equal(t, "10", got[DenialRingSize-1].RequestID)
}
