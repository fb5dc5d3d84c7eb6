// Package roles is spendgate's NATS permission layout: which subjects each
// kind of identity may publish and subscribe to, derived from a
// streams.Layout, and its rendering as a nats-server configuration.
//
// Four roles:
//
//   - replica runs `spendgate serve`: it creates and updates its ledger
//     stream (never deletes or purges it), reads it with ordered consumers
//     and direct gets, is the only role that writes the ledger's
//     $KV.<bucket>.> subjects, serves every endpoint under the prefix
//     (queue group "q") and answers $SRV discovery. It replies to requests
//     through allow_responses: it cannot publish into anyone's inbox
//     unasked.
//   - service is a calling service: admit, settle and release only.
//   - admin manages budgets: every endpoint, budget.put/get/list included,
//     and $SRV discovery (`nats micro info spendgate`).
//   - finance reads: budget.get/list, stream info, ephemeral (ordered)
//     consumers on the ledger stream, direct and message gets; enough for
//     `spendgate audit`. It writes nothing.
//
// Every role has a private inbox, _INBOX_<bucket>_<role>: a client of a
// role connects with that inbox prefix (natsconn.Options.InboxPrefix,
// --inbox-prefix, nats.CustomInboxPrefix), so no identity can read another
// one's replies (a ledger read, a budget list) by subscribing to _INBOX.>.
//
// Besides its allow lists, every role but replica carries an explicit deny
// of the ledger's write subjects (LedgerWrites): deny wins in nats-server,
// so a later, broader allow cannot open them. Deleting or purging the
// ledger stream is no role's business: an operator does it with an
// identity outside this layout.
//
// Known limits of subject permissions: a finance identity may create any
// consumer on the ledger stream, and JetStream does not check a push
// consumer's deliver subject against the creator's permissions. Consumers
// change no ledger data; to confine them as well, put finance in its own
// account that imports the stream (the accounts form of Render does not do
// this yet).
package roles
