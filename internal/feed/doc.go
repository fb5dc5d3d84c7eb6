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
// --feed). A relay reads the ledger stream with an ordered consumer from the
// revision of the last event in the feed, splits each revision into its
// events and publishes each with Nats-Msg-Id set to its id and
// Nats-Expected-Last-Sequence set to the feed's sequence of the previous
// event. The expected sequence makes the append a compare-and-set on the
// feed's end: an event can only follow its predecessor, so however many
// relays run, each event is appended once and in order. Up to MaxInFlight
// appends are pipelined: every relay splits the ledger into the same events
// in the same order, so the message at a feed sequence is the same event
// whoever appended it. A relay that loses
// (another relay appended first) reads the feed's last message again and
// resumes after it. The ledger keeps every revision, so a feed turned on
// late, or a relay down for a while, back-fills from where the feed ends.
//
// A relay relays exactly the revisions the replicas fold: it skips, and
// logs, a revision whose signature its keys refuse (WithTrust) and one
// that does not follow the last valid revision of its key (a replay, a
// gap, a fork; see events.Chain). Deciding that needs every earlier
// revision of the key, so a relay keeps each key's last valid revision
// while it runs, and writes it every DefaultCheckpointEvery revisions as
// a checkpoint in the ledger's snapshot bucket: a starting relay loads the
// newest one at or before the feed's tail and decides only the revisions
// after it, a start bounded by the lanes and budgets rather than the
// history (with none, it folds the ledger from its first revision; see
// checkpoint.go for who can write one and what is checked).
package feed
