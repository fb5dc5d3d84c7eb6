// Package feed is spendgate's live event feed: a documented, versioned
// stream (feed.v1) that other services follow to see every ledger event, one
// message per event, in commit order, each with a stable id.
//
// # Layout (feed.v1)
//
// The feed is the JetStream stream "<bucket>_feed" (streams.FeedStreamName,
// "spendgate_feed" by default). Each message's subject is
//
//	<prefix>feed.v1.<event type>.<scope kind>.<scope id>
//
// for example "spendgate.feed.v1.reservation.opened.v1.team.search", so a
// consumer filters by event type ("spendgate.feed.v1.reservation.settled.>")
// or by scope ("spendgate.feed.v1.*.*.*.team.search"). The body is a Message
// (JSON): the event exactly as the ledger stores it, under "event", and an
// envelope naming where it came from. The headers repeat the id
// (Nats-Msg-Id), the source sequence, the event index and type.
//
// An event's id is "<ledger stream sequence>-<index of the event in its
// revision>" (events.EventID). Ids are unique and the feed holds them in
// commit order: ordering the ids by (sequence, index) is the feed's order
// (Position). A consumer that remembers the Position of the last event it
// processed skips any message at or before it, and so sees every event
// exactly once even when its consumer redelivers after a crash (Cursor).
//
// A reservation over several budgets is stored as one event per balance
// (each ReservationOpened names all the reservation's balances), and the
// feed carries them as stored: one message per balance, sharing the
// reservation_id. A consumer that wants one row per reservation groups by
// reservation_id.
//
// # Relay
//
// The feed is filled by a Relay, which may run in every replica (serve
// --feed). A relay opens no consumer on the ledger: its replica's fold
// hands it every revision the gate passed (ledger.Reader), so what the
// replica skipped never reaches the feed, and every kind of event the
// ledger records does. It splits each revision into its events and
// appends each with Nats-Expected-Last-Sequence set to the feed's
// sequence of the previous event: the append is a compare-and-set on the
// feed's end, so however many relays run, each event is appended once and
// in order. Its Nats-Msg-Id is its id and the start of its signature, so
// that no message another login publishes can take it first (msgID). Up to
// MaxInFlight appends are pipelined: every relay hands the same verified
// events in the same order, so the message at a feed sequence is the same
// event whoever appended it; each also expects the previous append's
// Nats-Msg-Id, but on a clustered feed stream (expectsMsgID). A relay that
// loses (another relay appended first) finds the feed's end again and
// resumes after it.
//
// A relay signs what it appends and believes only what trusted keys
// signed: where the feed stands is the last message a trusted key signed
// (a forged message is skipped and counted, and any amount of them after
// it is read past, up to WithMaxTailScan), and when every message at the
// feed's end aged out, a signed checkpoint in the ledger's snapshot
// bucket (checkpoint.go). A consumer checks the same signature (Verify).
// A full queue holds the fold back at most the queue wait
// (DefaultQueueWait); the relay then drops events rather than stop the
// ledger, and once the feed takes appends again it reads them back
// through its replica's fold (ledger.Ledger.RefoldPassed: the revisions
// the fold handed it and it dropped, read from the stream again) and appends them before anything later. The ledger keeps every revision, so a feed
// turned on late, or a relay down for a while, back-fills from where the
// feed ends.
package feed
