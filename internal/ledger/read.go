package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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

// storedMsg is one message read back from the ledger stream.
type storedMsg struct {
	subject string
	seq     uint64
	header  nats.Header
	data    []byte
	at      time.Time // the stream's timestamp
}

// leaderGet reads one message through the stream leader (not a direct get,
// which any replica of an R3 stream may serve from a lagging copy). It is
// used where a stale answer would be wrong: catching up after a lost
// compare-and-set, and checking that a decision that writes nothing was
// made on the latest revision. found is false when no message matches.
//
// A read is safe to repeat, so an attempt that times out (each waits
// commitTimeout, like a commit's) or that the replicas answer "no leader"
// is retried until ctx ends: a busy or newly elected leader answers late,
// not wrongly.
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
	var raw *jetstream.RawStreamMsg
	for {
		actx, cancel := context.WithTimeout(ctx, l.opts.commitTimeout)
		var reply *nats.Msg
		reply, err = l.nc.RequestWithContext(actx, l.layout.MsgGetSubject(l.js), body)
		cancel()
		if err == nil {
			raw, found, err = streams.DecodeMsgGetReply(reply.Data)
		}
		if err == nil || ctx.Err() != nil || !retryableRead(err) {
			break
		}
		if errors.Is(err, nats.ErrNoResponders) || leaderless(err) {
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
	if !found {
		return m, false, nil
	}
	return storedMsg{subject: raw.Subject, seq: raw.Sequence, header: raw.Header, data: raw.Data, at: raw.Time}, true, nil
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

// streamEnd returns the stream's last sequence as its leader has it, from
// a stream info request whose answer is accepted only from the leader (0
// for an empty stream).
//
// Any replica may answer a stream info request from its own copy: every
// replica while the stream has no leader (its info then names no leader),
// and a replica that restarted within the last 10 s if it is the stream's
// preferred peer (its info names the leader, and lists the leader among
// the other replicas). A follower's copy may lack the writes the leader
// acknowledged last. So the request collects every answer until one comes
// from the leader: its info names a leader and does not list it among the
// other replicas (a replica leaves itself out; standalone, the server names
// itself and lists none). Attempts that see no such answer are repeated
// until ctx ends, as leaderGet's are.
//
// (A message get of the stream's last message would be answered by the
// leader only, but it carries that message, up to the max payload, and a
// miss or a health probe would fetch it every time.)
func (l *Ledger) streamEnd(ctx context.Context) (uint64, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 4*l.opts.commitTimeout)
		defer cancel()
	}
	inbox := l.nc.NewRespInbox()
	sub, err := l.nc.SubscribeSync(inbox)
	if err != nil {
		return 0, &events.Error{Code: events.CodeLedgerUnavailable, Message: "reading the ledger stream's end", Err: err}
	}
	defer func() { _ = sub.Unsubscribe() }()
	subject := l.layout.InfoSubject(l.js)
	last := errors.New("no answer from the stream's leader")
	for ctx.Err() == nil {
		if err := l.nc.PublishRequest(subject, inbox, nil); err != nil {
			last = err
		} else {
			actx, cancel := context.WithTimeout(ctx, l.opts.commitTimeout)
			for {
				msg, err := sub.NextMsgWithContext(actx)
				if err != nil {
					break // this attempt is over: ask again
				}
				seq, leader, err := leaderInfo(msg)
				if err != nil {
					last = err
					continue
				}
				if leader {
					cancel()
					return seq, nil
				}
			}
			cancel()
		}
		if !pause(ctx, 25*time.Millisecond) {
			break
		}
	}
	return 0, &events.Error{Code: events.CodeLedgerUnavailable, Message: "reading the ledger stream's end", Err: last}
}

// streamInfoReply is the part of a stream info answer streamEnd reads.
type streamInfoReply struct {
	Error *jetstream.APIError `json:"error,omitempty"`
	State struct {
		LastSeq uint64 `json:"last_seq"`
	} `json:"state"`
	Cluster *struct {
		Leader   string `json:"leader"`
		Replicas []struct {
			Name string `json:"name"`
		} `json:"replicas"`
	} `json:"cluster"`
}

// leaderInfo decodes a stream info answer: the last sequence, and whether
// the stream's leader gave it.
func leaderInfo(msg *nats.Msg) (uint64, bool, error) {
	if len(msg.Data) == 0 {
		return 0, false, errors.New("empty stream info answer (no responders?)")
	}
	var r streamInfoReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return 0, false, err
	}
	if r.Error != nil {
		return 0, false, r.Error
	}
	if r.Cluster == nil {
		return r.State.LastSeq, true, nil
	}
	if r.Cluster.Leader == "" {
		return 0, false, errors.New("the ledger stream has no leader")
	}
	for _, p := range r.Cluster.Replicas {
		if p.Name == r.Cluster.Leader {
			return 0, false, nil // a follower's own copy
		}
	}
	return r.State.LastSeq, true, nil
}

// retryableRead reports whether a failed read request may succeed if sent
// again: it timed out, no server answered yet, or the replicas answered
// that the stream has no leader (a leader election).
func retryableRead(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		leaderless(err)
}

// leaderless reports whether err is JetStream's answer that the stream
// (or the cluster) has no leader right now: the replicas of a stream
// whose leader is lost answer a message get so, until one is elected.
func leaderless(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && streams.IsTransient(apiErr) && apiErr.ErrorCode != jetstream.JSErrCodeStreamNotFound
}

// directBatch reads up to n messages of the ledger stream from sequence
// from on, in order, with one batched direct get (nats-server 2.11's
// {"seq","batch"}): any replica of the stream may answer, so on a cluster
// a lagging one may hold fewer than are there; the caller reads on from
// the last one returned, and treats none returned as "ask the leader".
// Each message carries its stream timestamp.
func (l *Ledger) directBatch(ctx context.Context, from uint64, n int) ([]storedMsg, error) {
	body, err := json.Marshal(struct {
		Seq   uint64 `json:"seq"`
		Batch int    `json:"batch"`
	}{from, n})
	if err != nil {
		return nil, err
	}
	inbox := l.nc.NewInbox()
	sub, err := l.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := l.nc.PublishRequest(l.layout.DirectGetSubject(l.js), inbox, body); err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, 4*l.opts.commitTimeout)
	defer cancel()
	var out []storedMsg
	for {
		m, err := sub.NextMsgWithContext(actx)
		if err != nil {
			return out, err
		}
		if st := m.Header.Get("Status"); st != "" {
			switch st {
			case "204", "404": // the batch's end; no message at or after from
				return out, nil
			case "503":
				return out, nats.ErrNoResponders
			default:
				return out, fmt.Errorf("ledger: direct get: status %s %s", st, m.Header.Get("Description"))
			}
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return out, fmt.Errorf("ledger: direct get: no sequence: %w", err)
		}
		at, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
		subject := m.Header.Get(jetstream.SubjectHeader)
		h := nats.Header{}
		for k, v := range m.Header {
			switch k {
			case jetstream.StreamHeader, jetstream.SequenceHeader, jetstream.TimeStampHeaer, jetstream.SubjectHeader, "Nats-Num-Pending", "Nats-Last-Sequence", "Nats-UpTo-Sequence":
			default:
				h[k] = v
			}
		}
		out = append(out, storedMsg{subject: subject, seq: seq, header: h, data: m.Data, at: at})
	}
}
