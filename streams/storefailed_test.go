package streams_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/streams"
)

// TestIsStoreFailed: the create that met "error creating store for
// stream" (10049) is retried by Ensure and the side streams' ensure, as
// the ensure wraps it; other API errors are not this one.
func TestIsStoreFailed(t *testing.T) {
	failed := &jetstream.APIError{Code: 500, ErrorCode: 10049, Description: "error creating store for stream"}
	require.True(t, streams.IsStoreFailed(failed))
	require.True(t, streams.IsStoreFailed(fmt.Errorf("streams: ensure side31_feed: %w", failed)))
	require.False(t, streams.IsStoreFailed(&jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use"}))
	require.False(t, streams.IsStoreFailed(errors.New("error creating store for stream")), "by code, not by text")
	require.False(t, streams.IsStoreFailed(nil))
}
