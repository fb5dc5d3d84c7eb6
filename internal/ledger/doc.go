// Package ledger is spendgate's storage engine: the in-memory book that every
// replica folds from the ledger stream, and the commit path that turns a
// decision into one compare-and-set write.
//
// # Layout
//
// Every budget definition is a key of the ledger bucket, and so is every
// commit lane (see package streams), every model's prices (pricing.<model>)
// and every scope kind's default budget per period (default.<kind>.<period>);
// the last two are chained like budget.v2 revisions. Every balance (a budget in one period
// instance) belongs to one lane, chosen by its scope. A lane key's value is
// an events.LaneRevision: each balance the revision changed, with its
// numbers after the revision and the events the revision applied to it. The
// stream keeps every revision, so it is the book of record: one write
// carries both the state change and its events, and there is no second
// write to lose.
//
// # Book, follower, committer
//
// The engine has three parts, each a type in its own file (the Ledger
// embeds the follower's and the committer's state and holds the book under
// its mutex):
//
//   - The book (book.go) is the state and its fold: budgets, balances,
//     open and recently closed reservations, request ids, voided request
//     ids (tombstones: an admit of one reserves nothing), and the last
//     revision and payload hash of every key. It does no I/O and reads no
//     clock; it is tested like projector.State. A snapshot (snapshot.go)
//     is the book dumped at a stream sequence; its expiry index (due.go)
//     makes listing what is due cost what is due; its idempotency window
//     (window.go) keeps each closed reservation in ~150 bytes.
//   - The follower (follower.go, Run) folds every revision of the stream
//     into the book in stream order, and owns the Ledger's lifetime.
//   - The committer (committer.go, Submit) queues Txs per lane, decides a
//     group of them against a View, verifies the decisions that write
//     nothing, writes one revision per lane (an atomic batch when a group
//     spans lanes), folds its own write into the book, and classifies a
//     failed write into an action: retry after folding what was missed,
//     retry with the outcome unknown, split an oversized group, or fail.
//     New kinds of change are new Txs. Every write is signed (WithSigner,
//     signing.go); the follower checks the signature of every revision it
//     did not write itself (WithTrust) before it decodes it.
//
// # Snapshots
//
// A snapshot (snapshot.go, snapshots.go) is the book at one exact stream
// sequence, written to the object store bucket streams.Layout.
// SnapshotBucket: on demand (Snapshot) and by Run every
// DefaultSnapshotRevisions revisions or DefaultSnapshotInterval. It is
// taken at an instant when no key has a revision folded past the
// follower's position (a committer folds its own writes first), so it
// holds every revision up to its sequence and nothing after. Run loads the
// newest one that passes its digest and describes this layout, and the
// follower folds from the next sequence; a snapshot whose tail does not
// follow its chain is dropped for the whole fold before Ready. Snapshots
// never replace the stream, which stays the book of record.
//
// # Invariants
//
//   - The book folds the revisions of one key in stream order, from three
//     sources (follower, catch-up after a lost compare-and-set, own
//     writes); a revision at or below the key's last folded one is skipped.
//   - Chain: each revision (lane.v2, budget.v2) names the revision of its
//     key it follows (stream sequence and SHA-256 of its payload bytes). The
//     book refuses one that does not follow its last valid revision. Lane
//     revisions list only the balances they change, so without the chain a
//     lost revision would lose balances silently. A v1 revision carries no
//     chain; checking starts at the first v2 revision.
//   - Skip and serve: a revision that is unsigned (when WithTrust asks for
//     signatures), signed by a key not trusted, badly signed, malformed, a
//     replay or off its chain is never folded: it is skipped (a
//     *Rejection), logged and counted, and the replica keeps serving. The
//     book then holds two revisions for the key: the last one seen, which
//     the next compare-and-set names (so this replica's next write lands
//     after the skipped one), and the last valid one, which the next
//     revision's chain names (book.seen; kept in snapshots). Only a stream
//     this code cannot fold at all (a balance under another lane, a balance
//     key of an older layout) stops the follower. Right after a snapshot
//     is loaded, a chain break is taken for a snapshot that does not
//     describe this stream, and the whole stream is folded instead.
//   - Decisions are made only against the exact lane revisions that the
//     write then requires (Nats-Expected-Last-Subject-Sequence on every
//     lane key), so no replica can admit against a stale balance:
//     compare-and-set is the only arbiter, across any number of replicas,
//     with no lock held in NATS. Decisions made on lanes the group does not
//     write are checked against the leader's last revision before anyone
//     is answered.
//   - All or none: a Tx's events are applied to the group's View all or
//     none (journaled, rolled back on error). If the group's write fails,
//     every Tx of the group gets the write's error, since its answer may
//     rest on a sibling's uncommitted change.
//   - Fail closed: decisions are taken only while Run runs and after
//     Ready; once Run returns, Submit, PutBudget and Sync answer
//     CodeLedgerUnavailable.
//   - Bounded and owned: every attempt of a commit shares one deadline,
//     taken from the caller's ctx (or WithSubmitTimeout); a caller's
//     cancellation never abandons a write shared with others, and no
//     caller's ctx is used for a group's writes. Background committers are
//     owned by Run, which waits for them. The lane lock is held only for
//     one decide-and-write attempt; catch-up reads and back-off run without
//     it (see commitGroup for the one network call that must hold it).
//
// An event's stable id is "<stream seq>-<index of the event in its
// revision>" (events.EventID): the feed and the exports name events by it.
package ledger
