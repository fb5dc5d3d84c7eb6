package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// leaderGetRequest is the body of $JS.API.STREAM.MSG.GET.<stream>.
type leaderGetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
}

type leaderGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Subject  string `json:"subject"`
		Sequence uint64 `json:"seq"`
		Header   []byte `json:"hdrs,omitempty"`
		Data     []byte `json:"data,omitempty"`
	} `json:"message,omitempty"`
}

// storedMsg is one message read back from the ledger stream.
type storedMsg struct {
	subject string
	seq     uint64
	header  nats.Header
	data    []byte
}

// leaderGet reads one message through the stream leader (not a direct get,
// which any replica of an R3 stream may serve from a lagging copy). It is
// used where a stale answer would be wrong: catching up after a lost
// compare-and-set, and checking that a decision that writes nothing was
// made on the latest revision. found is false when no message matches.
//
// A read is safe to repeat, so an attempt that times out (each waits
// commitTimeout, like a commit's) is retried until ctx ends: a busy or
// newly elected leader answers late, not wrongly.
func (l *Ledger) leaderGet(ctx context.Context, req leaderGetRequest) (m storedMsg, found bool, err error) {
	body, err := json.Marshal(req)
	if err != nil {
		return m, false, err
	}
	if _, ok := ctx.Deadline(); !ok {
		// No caller's deadline (start-up checks): a few attempts.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 4*l.opts.commitTimeout)
		defer cancel()
	}
	var reply *nats.Msg
	for {
		actx, cancel := context.WithTimeout(ctx, l.opts.commitTimeout)
		reply, err = l.nc.RequestWithContext(actx, l.layout.MsgGetSubject(l.js), body)
		cancel()
		if err == nil || ctx.Err() != nil || !retryableRead(err) {
			break
		}
		if errors.Is(err, nats.ErrNoResponders) {
			// Answered at once: no leader yet. Give the election a moment.
			t := time.NewTimer(25 * time.Millisecond)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
	if err != nil {
		return m, false, &events.Error{Code: events.CodeLedgerUnavailable, Message: "reading the ledger stream", Err: err}
	}
	var resp leaderGetResponse
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return m, false, &events.Error{Code: events.CodeLedgerUnavailable, Message: "reading the ledger stream", Err: err}
	}
	if resp.Error != nil {
		if streams.IsNoMessage(resp.Error.ErrorCode) {
			return m, false, nil
		}
		return m, false, &events.Error{Code: events.CodeLedgerUnavailable, Message: "reading the ledger stream", Err: resp.Error}
	}
	if resp.Message == nil {
		return m, false, fmt.Errorf("ledger: empty message get reply")
	}
	m = storedMsg{subject: resp.Message.Subject, seq: resp.Message.Sequence, data: resp.Message.Data}
	if len(resp.Message.Header) > 0 {
		if m.header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			// Unreadable headers are no signature: Verify decides.
			m.header = nil
		}
	}
	return m, true, nil
}

// latestRev returns the last revision of key as the stream leader has it
// (0 if the key does not exist).
func (l *Ledger) latestRev(ctx context.Context, key string) (uint64, error) {
	m, found, err := l.leaderGet(ctx, leaderGetRequest{LastFor: l.layout.Subject(key)})
	if err != nil || !found {
		return 0, err
	}
	return m.seq, nil
}

// retryableRead reports whether a failed read request may succeed if sent
// again: it timed out, or no server answered yet (a leader election).
func retryableRead(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders)
}
