package feed

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Message is the body of one feed.v1 message.
type Message struct {
	// Schema is always streams.FeedSchema ("feed.v1").
	Schema string `json:"schema"`
	// ID is the event's stable id, "<source_seq>-<index>".
	ID string `json:"id"`
	// SourceSeq is the ledger stream sequence of the revision that
	// committed the event; Index the event's place in that revision (from
	// 0, over the revision's balances in order, then each balance's
	// events in order).
	SourceSeq uint64 `json:"source_seq"`
	Index     int    `json:"index"`
	// Key is the ledger key of the revision: "lane.<n>" or
	// "budget.<kind>.<id>.<period>".
	Key string `json:"key"`
	// CommittedAt is when the ledger stream stored the revision (the
	// server's clock), RFC 3339 UTC.
	CommittedAt time.Time `json:"committed_at"`
	// Type is the event's type, the same as Event's "type".
	Type events.Type `json:"type"`
	// Balance is the balance the event applied to, with its numbers after
	// the whole revision (a revision may apply several events to one
	// balance; each carries the same after-state). Absent for
	// budget.defined.v1.
	Balance *Balance `json:"balance,omitempty"`
	// Event is the event exactly as encoded in the ledger revision.
	Event json.RawMessage `json:"event"`
}

// Balance is a balance after a revision (events.BalanceRevision without its
// events). Money is a decimal string.
type Balance struct {
	Ref      events.BalanceRef `json:"ref"`
	Unit     string            `json:"unit"`
	Limit    events.Money      `json:"limit"`
	Spent    events.Money      `json:"spent"`
	Reserved events.Money      `json:"reserved"`
	Overrun  events.Money      `json:"overrun"`
	Open     int64             `json:"open"`
}

// Decode reads one feed message body. It returns an error if the schema is
// not feed.v1 or the id does not match the source sequence and index.
func Decode(data []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("feed: %w", err)
	}
	if m.Schema != streams.FeedSchema {
		return m, fmt.Errorf("feed: schema %q, want %q", m.Schema, streams.FeedSchema)
	}
	if m.ID != events.EventID(m.SourceSeq, m.Index) {
		return m, fmt.Errorf("feed: id %q does not match source_seq %d and index %d", m.ID, m.SourceSeq, m.Index)
	}
	return m, nil
}

// Decoded decodes the event (events.DecodeEvent).
func (m Message) Decoded() (events.Event, error) { return events.DecodeEvent(m.Event) }

// Position is an event's place in the feed: its revision's ledger sequence
// and its index there. Positions order the feed.
type Position struct {
	Seq   uint64
	Index int
}

// Position returns m's position.
func (m Message) Position() Position { return Position{Seq: m.SourceSeq, Index: m.Index} }

// ID returns the event id of p.
func (p Position) ID() string { return events.EventID(p.Seq, p.Index) }

// Before reports whether p comes before q in the feed.
func (p Position) Before(q Position) bool {
	return p.Seq < q.Seq || (p.Seq == q.Seq && p.Index < q.Index)
}

// ParseID parses an event id "<seq>-<index>".
func ParseID(id string) (Position, error) {
	s, i, ok := strings.Cut(id, "-")
	seq, err1 := strconv.ParseUint(s, 10, 64)
	idx, err2 := strconv.Atoi(i)
	if !ok || err1 != nil || err2 != nil || seq == 0 || idx < 0 {
		return Position{}, fmt.Errorf("feed: bad event id %q", id)
	}
	return Position{Seq: seq, Index: idx}, nil
}

// Cursor deduplicates a feed consumer: it remembers the position of the
// last event processed. Store it with the effect of processing (in the
// same transaction) and reload it after a restart; a redelivered message
// is then skipped, not processed twice.
type Cursor struct {
	// Last is the last event processed; the zero Position before any.
	Last Position
}

// Next reports whether m is new (after Last) and, if so, moves Last to it.
// A false answer is a duplicate: acknowledge it and do nothing else.
func (c *Cursor) Next(m Message) bool {
	p := m.Position()
	if !c.Last.Before(p) {
		return false
	}
	c.Last = p
	return true
}
