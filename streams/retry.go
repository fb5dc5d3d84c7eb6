package streams

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bounds of the start-up retries (Ensure, and binding the ledger stream in
// ledger.New): replicas that start together on a cluster that is still
// forming, or on a stream another replica is creating at that moment, meet
// errors that clear within seconds.
const (
	// StartRetryFor bounds how long Ensure retries transient errors.
	StartRetryFor = 30 * time.Second
	// BindRetryFor bounds how long binding an existing stream retries a
	// "stream not found" (a stream another replica just created may not be
	// visible everywhere yet).
	BindRetryFor = 10 * time.Second
	// StartAttemptTimeout bounds one JetStream API request at start: on a
	// cluster whose stream has no leader yet, a request may go unanswered.
	StartAttemptTimeout = 5 * time.Second
	// startRetryPause is the pause between attempts.
	startRetryPause = 100 * time.Millisecond
)

// JetStream error codes that clear on their own while a cluster forms or a
// stream is being created.
const (
	errClusterNotAvail  jetstream.ErrorCode = 10008 // JetStream system temporarily unavailable
	errClusterNotLeader jetstream.ErrorCode = 10009
	errStreamOffline    jetstream.ErrorCode = 10118
)

// IsTransient reports whether err, met at start-up, is worth retrying:
// the stream is not found (yet), no suitable peers (10005), the cluster or
// the stream has no leader (10008, 10009, 10118), no responders, or a
// request timed out.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamNotFound, errNoSuitablePeers, errClusterNotAvail, errClusterNotLeader, errStreamOffline:
			return true
		}
	}
	return false
}

// RetryStart calls f, each attempt bounded by StartAttemptTimeout, until it
// succeeds, fails with an error retry does not accept, within has passed,
// or ctx ends; it returns f's last error. retry nil means IsTransient.
func RetryStart(ctx context.Context, within time.Duration, retry func(error) bool, f func(ctx context.Context) error) error {
	if retry == nil {
		retry = IsTransient
	}
	deadline := time.Now().Add(within)
	for {
		actx, cancel := context.WithTimeout(ctx, StartAttemptTimeout)
		err := f(actx)
		cancel()
		if err == nil || !retry(err) || ctx.Err() != nil || !time.Now().Before(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(startRetryPause):
		}
	}
}
