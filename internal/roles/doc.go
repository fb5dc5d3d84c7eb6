// Package roles is spendgate's NATS permission layout: which subjects each
// kind of identity may publish and subscribe to, derived from a
// streams.Layout, and its rendering as a nats-server configuration.
//
// Six roles:
//
//   - replica runs `spendgate serve`: it creates and updates its ledger
//     stream (never deletes or purges it), reads it with ordered consumers
//     and direct gets, is the only role that writes the ledger's
//     $KV.<bucket>.> subjects, serves every endpoint under the prefix
//     (queue group "q") and answers $SRV discovery. It replies to requests
//     through allow_responses: it cannot publish into anyone's inbox
//     unasked.
//   - service is a calling service: admit, settle, release and void (and
//     their batch forms) only.
//   - admin manages budgets: every endpoint, budget.put/get/list included,
//     and $SRV discovery (`nats micro info spendgate`).
//   - finance reads: budget.get/list, report, stream info, ephemeral
//     (ordered) consumers on the ledger stream, direct and message gets;
//     enough for `spendgate audit` and `spendgate report` (from the API or
//     --replay). It writes nothing.
//   - feed follows the live event feed (package feed): it reads the feed
//     stream with durable or ordered consumers and acknowledges what it
//     processed. The replica role appends to the feed (serve --feed); no
//     role deletes or purges it.
//   - gateway runs `spendgate gateway`: its keys' admits, settles,
//     releases and voids, the HTTP API's endpoints (reads, and the budget
//     and pricing puts a key with admin access passes on), for the
//     deployment and every tenant, and apikey.resolve. It cannot mint,
//     rotate or list keys, call discovery or touch any stream.
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
// Tenants: Config(l, account, tenants...) renders one account per tenant
// beside the replicas' account. The replicas' account exports
// "<prefix>t.<tenant>.>" (TenantExport) to that tenant's account alone;
// the tenant's account imports TenantEndpoints from there under their plain
// subjects (TenantImports: "spendgate.t.acme.admit" seen as
// "spendgate.admit"), so the replica reads the tenant from a subject token
// the server fixes per account and the tenant cannot choose. It also
// imports the reading half of the JetStream API of its one feed consumer
// (TenantFeedImports, under TenantJSPrefix: info, pull, ack); the operator's
// admin creates that consumer as a pull consumer with the tenant's filter,
// which the create subject it may publish fixes (TenantConsumerAdmin,
// feed.EnsureTenantConsumer). No other role, the tenant's included, can
// create, change, delete, pull from or acknowledge for it: All(l, tenants...)
// denies each tenant's consumer to the feed role by name, and replicas
// check it at start and every minute (feed.TenantCheck). Its one user,
// named after the tenant, may publish only those (role Tenant). The admin
// role may call every tenant's subjects (budgets are the operator's to
// define); the service role may not.
//
// Rendering: Authorization writes a nats-server "authorization" block
// (users in the global account), Accounts the same users inside one account
// with JetStream; passwords stay out of the file (the server reads
// SPENDGATE_<USER>_PASSWORD from its environment) unless given. In
// operator/JWT mode, Role.JWTPermissions is what to sign into a user JWT and
// Role.NSCFlags the same as `nsc add user` flags; NSC renders the whole
// layout, tenants included, as nsc commands (private exports, an activation
// token per tenant import).
//
// The layout was derived from a real run (TestRoles_CoverARealRun records
// every subject each identity uses from the server's protocol trace and
// fails if the layout refuses one) and is checked subject by subject on a
// real server (TestRoles_Matrix), in both forms and in operator mode.
//
// Known limits of subject permissions: finance and replica may create any
// consumer on the ledger stream (ordered consumers need it), feed any on
// the feed stream but the tenants' (each named in its denies), and delete
// consumers by name, and JetStream does not check a push consumer's deliver subject
// against its creator's permissions (a replica ends a delivery that
// reaches an endpoint without serving it). Consumers change no ledger data;
// to confine them as well, put these roles in accounts of their own that
// import the streams. Tenants create no consumer.
package roles
