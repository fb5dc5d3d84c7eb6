package roles

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spendgate/spendgate/streams"
)

// Role names.
const (
	Replica = "replica"
	Service = "service"
	Admin   = "admin"
	Finance = "finance"
	Feed    = "feed"
	Gateway = "gateway"
	Alerts  = "alerts"
)

// Names lists the roles in the order All returns them.
var Names = []string{Replica, Service, Admin, Finance, Feed, Gateway, Alerts}

// Rules is one direction (publish or subscribe) of a permission set, as
// nats-server reads it: a subject is permitted if it matches an Allow
// entry (or Allow is empty) and no Deny entry.
type Rules struct {
	Allow []string
	Deny  []string
}

// Role is a named permission set.
type Role struct {
	// Name of the role ("replica").
	Name string
	// Description is one line on who uses the role; Render prints it as
	// a comment.
	Description string
	// Publish and Subscribe are the role's subject permissions.
	Publish, Subscribe Rules
	// AllowResponses lets the role publish one reply to the reply subject
	// of each request it received (nats-server allow_responses).
	AllowResponses bool
	// InboxPrefix is the prefix of the role's reply subjects; its clients
	// must connect with it (nats.CustomInboxPrefix). Empty means the
	// role's Subscribe rules already cover _INBOX.
	InboxPrefix string
}

// InboxPrefix is the private inbox prefix of role in layout l:
// "_INBOX_<bucket>_<role>".
func InboxPrefix(l streams.Layout, role string) string {
	return "_INBOX_" + l.Bucket() + "_" + role
}

// srvVerbs are the NATS micro discovery verbs.
var srvVerbs = []string{"PING", "INFO", "STATS"}

// discovery is every $SRV subject of the spendgate service: the verb, the
// verb for the service name, and for one instance.
func discovery() []string {
	var out []string
	for _, v := range srvVerbs {
		out = append(out, "$SRV."+v, "$SRV."+v+"."+streams.ServiceName, "$SRV."+v+"."+streams.ServiceName+".*")
	}
	return out
}

// jsAPI is "$JS.API.".
const jsAPI = "$JS.API."

// LedgerWrites returns the subjects that change the ledger of l: its KV
// write subjects and the JetStream API calls that create, change, delete,
// purge, restore or reshape its stream, delete a message, or create a
// durable consumer by the legacy subject. Only the replica role may publish
// to the first ones (create and the KV subjects); no role may publish to
// the others.
func LedgerWrites(l streams.Layout) []string {
	s := l.StreamName()
	return append([]string{
		l.KeyPrefix() + ">",
		jsAPI + "STREAM.CREATE." + s,
	}, ledgerAdmin(l)...)
}

// ledgerAdmin are the ledger writes no role may publish: updating the
// stream's configuration (its limits could drop old revisions), deleting
// or purging the stream or a message, restoring it, moving it, and
// creating a durable consumer by the legacy subject. Replicas update the
// stream only when its configuration differs (streams.Ensure), which takes
// an identity outside these roles.
func ledgerAdmin(l streams.Layout) []string {
	return append([]string{jsAPI + "STREAM.UPDATE." + l.StreamName()}, streamAdmin(l.StreamName())...)
}

// streamAdmin are the JetStream API subjects that delete, purge, restore or
// move stream s, delete one of its messages, or create a durable consumer
// on it by the legacy subject.
func streamAdmin(s string) []string {
	return []string{
		jsAPI + "STREAM.DELETE." + s,
		jsAPI + "STREAM.PURGE." + s,
		jsAPI + "STREAM.MSG.DELETE." + s,
		jsAPI + "STREAM.RESTORE." + s,
		jsAPI + "STREAM.PEER.REMOVE." + s,
		jsAPI + "STREAM.LEADER.STEPDOWN." + s,
		jsAPI + "CONSUMER.DURABLE.CREATE." + s + ".>",
	}
}

// FeedWrites returns the subjects that write the live event feed of l (the
// feed stream's subjects and its create and update) and the feed stream's
// administration. Only the replica role may publish to the first ones; no
// role may publish to the others.
func FeedWrites(l streams.Layout) []string { return streamWrites(l.FeedFilter(), l.FeedStreamName()) }

// DenialWrites returns the subjects that write the denial records of l
// (the denial stream's subjects and its create and update) and the denial
// stream's administration, as FeedWrites does for the feed.
func DenialWrites(l streams.Layout) []string {
	return streamWrites(l.DenialFilter(), l.DenialStreamName())
}

// AlertWrites returns the subjects that write the alert stream of l (its
// subjects and its create and update) and the alert stream's
// administration, as FeedWrites does for the feed.
func AlertWrites(l streams.Layout) []string {
	return streamWrites(l.AlertFilter(), l.AlertStreamName())
}

// alertSink is what the webhook sink (spendgate alerts webhook, as the
// alerts role or the admin) publishes: stream info, its durable
// consumer's create, info and pulls, and acknowledgements.
func alertSink(l streams.Layout) []string {
	a := l.AlertStreamName()
	return []string{
		jsAPI + "STREAM.INFO." + a,
		jsAPI + "CONSUMER.CREATE." + a + ".>",
		jsAPI + "CONSUMER.INFO." + a + ".*",
		jsAPI + "CONSUMER.MSG.NEXT." + a + ".*",
		"$JS.ACK." + a + ".>",
	}
}

// streamWrites are the writes of the stream name with subjects filter
// (publishing, create, update), then its administration (streamAdmin).
func streamWrites(filter, name string) []string {
	return append([]string{filter, jsAPI + "STREAM.CREATE." + name, jsAPI + "STREAM.UPDATE." + name}, streamAdmin(name)...)
}

// feedAdmin are the feed writes no role may publish.
func feedAdmin(l streams.Layout) []string { return streamAdmin(l.FeedStreamName()) }

// denialAdmin are the denial stream writes no role may publish.
func denialAdmin(l streams.Layout) []string { return streamAdmin(l.DenialStreamName()) }

// streamReads are what an ordered reader of the stream name publishes:
// stream info and message gets, consumers (created, pulled, deleted) and
// their flow control.
func streamReads(name string) []string {
	return []string{
		jsAPI + "STREAM.INFO." + name,
		jsAPI + "STREAM.MSG.GET." + name,
		jsAPI + "DIRECT.GET." + name,
		jsAPI + "DIRECT.GET." + name + ".>",
		jsAPI + "CONSUMER.CREATE." + name,
		jsAPI + "CONSUMER.CREATE." + name + ".>",
		jsAPI + "CONSUMER.MSG.NEXT." + name + ".*",
		jsAPI + "CONSUMER.DELETE." + name + ".*",
		"$JS.FC." + name + ".>",
	}
}

// feedReads are what a consumer of the feed publishes: streamReads, plus
// durable consumers' info and acknowledgements, but not the create subject
// without a consumer name (it takes the name, and any filter, from the
// body: a feed client could update a tenant's consumer through it).
func feedReads(l streams.Layout) []string {
	f := l.FeedStreamName()
	legacy := jsAPI + "CONSUMER.CREATE." + f
	out := []string{}
	for _, s := range streamReads(f) {
		if s != legacy {
			out = append(out, s)
		}
	}
	return append(out, jsAPI+"CONSUMER.INFO."+f+".*", "$JS.ACK."+f+".>")
}

// TenantConsumerAdmin is what the operator's admin publishes to manage
// tenant's feed consumer (spendgate feed consumer --tenant): read its info,
// create it with the tenant's filter, which the create subject fixes
// (feed.TenantConsumerConfig), and delete it (--replace). No other role
// may publish any of them.
func TenantConsumerAdmin(l streams.Layout, tenant string) []string {
	f, c := l.FeedStreamName(), streams.TenantFeedConsumer(tenant)
	return []string{
		jsAPI + "CONSUMER.INFO." + f + "." + c,
		jsAPI + "CONSUMER.CREATE." + f + "." + c + "." + l.TenantFeedFilter(tenant),
		jsAPI + "CONSUMER.DELETE." + f + "." + c,
	}
}

// tenantConsumerGuard is what the feed role is denied for tenant's feed
// consumer: every consumer API call on it (create or update, delete,
// pause, info; pulls, whose verb is two tokens) and acknowledgements for
// it. Its
// allow lists name consumers by wildcard, and a consumer name cannot be
// matched by prefix ("t-*"), so each tenant is named.
func tenantConsumerGuard(l streams.Layout, tenant string) []string {
	f, c := l.FeedStreamName(), streams.TenantFeedConsumer(tenant)
	return []string{
		jsAPI + "CONSUMER.*." + f + "." + c,
		jsAPI + "CONSUMER.*." + f + "." + c + ".>",
		jsAPI + "CONSUMER.MSG.NEXT." + f + "." + c,
		"$JS.ACK." + f + "." + c + ".>",
	}
}

// denialReads are what a reader of the denial records publishes (the
// replica's spend report, spendgate report --replay): streamReads.
func denialReads(l streams.Layout) []string { return streamReads(l.DenialStreamName()) }

// ledgerReads are the JetStream API subjects that read the ledger stream
// of l: its info, ephemeral and ordered consumers (created by either
// subject form, pulled, deleted when done: a KV watch deletes its consumer
// on stop), direct and message gets, and flow control replies of push
// consumers (a KV watch).
func ledgerReads(l streams.Layout) []string {
	s := l.StreamName()
	return []string{
		jsAPI + "STREAM.INFO." + s,
		jsAPI + "STREAM.MSG.GET." + s,
		jsAPI + "DIRECT.GET." + s,
		jsAPI + "DIRECT.GET." + s + ".>",
		jsAPI + "CONSUMER.CREATE." + s,
		jsAPI + "CONSUMER.CREATE." + s + ".>",
		jsAPI + "CONSUMER.MSG.NEXT." + s + ".*",
		jsAPI + "CONSUMER.DELETE." + s + ".*",
		"$JS.FC." + s + ".>",
	}
}

// snapshotReads are the JetStream API subjects that read the ledger's
// snapshot bucket (an object store, stream OBJ_<bucket>_snapshots): its
// info, the ordered consumers that read an object's chunks and list the
// objects, direct and message gets of an object's metadata, and flow
// control replies.
func snapshotReads(l streams.Layout) []string {
	s := l.SnapshotStreamName()
	return []string{
		jsAPI + "STREAM.INFO." + s,
		jsAPI + "STREAM.MSG.GET." + s,
		jsAPI + "DIRECT.GET." + s,
		jsAPI + "DIRECT.GET." + s + ".>",
		jsAPI + "CONSUMER.CREATE." + s,
		jsAPI + "CONSUMER.CREATE." + s + ".>",
		jsAPI + "CONSUMER.MSG.NEXT." + s + ".*",
		jsAPI + "CONSUMER.DELETE." + s + ".*",
		"$JS.FC." + s + ".>",
	}
}

// snapshotWrites are what a replica needs to write snapshots: create the
// bucket, publish an object's chunks and metadata, and purge the chunks of
// a snapshot it replaces or deletes. Not update it: an update could make
// its stream capture other subjects (an endpoint, whose callers would read
// the stream's acknowledgements as answers; other roles' inboxes), as
// snapshotAdmin says.
func snapshotWrites(l streams.Layout) []string {
	s := l.SnapshotStreamName()
	return []string{
		jsAPI + "STREAM.CREATE." + s,
		jsAPI + "STREAM.PURGE." + s,
		jsAPI + "CONSUMER.INFO." + s + ".*",
		"$O." + l.SnapshotBucket() + ".>",
	}
}

// snapshotAdmin are the snapshot bucket's writes no role may publish: its
// update (above), delete, restore, moves and the legacy durable create.
// Its purge is the replica's (snapshotWrites).
func snapshotAdmin(l streams.Layout) []string {
	s := l.SnapshotStreamName()
	out := []string{jsAPI + "STREAM.UPDATE." + s}
	for _, a := range streamAdmin(s) {
		if a != jsAPI+"STREAM.PURGE."+s {
			out = append(out, a)
		}
	}
	return out
}

// All returns the roles of layout l: replica, service, admin, finance,
// feed, gateway, alerts.
//
// tenants are the tenants the deployment serves (Config's): the admin may
// create, read and delete each one's feed consumer (TenantConsumerAdmin),
// and the feed role may not touch it (create, update, delete, pull, ack).
// Without tenants no account reads a tenant's consumer, so neither role
// names one; a layout must be rendered again when a tenant is added.
func All(l streams.Layout, tenants ...string) []Role {
	s := l.StreamName()
	ep := func(names ...string) []string {
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = l.Endpoint(n)
		}
		return out
	}
	// tenantEp is every tenant's subject of each endpoint: the admin
	// manages tenants' budgets (spendgate budget put --tenant NAME).
	tenantEp := func(names ...string) []string {
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = l.TenantEndpoints(n)
		}
		return out
	}
	inbox := func(role string) []string { return []string{InboxPrefix(l, role) + ".>"} }
	writes := slices.Concat(LedgerWrites(l), FeedWrites(l), DenialWrites(l), AlertWrites(l))
	f := l.FeedStreamName()

	replicaPub := []string{
		jsAPI + "STREAM.CREATE." + s,
	}
	replicaPub = append(replicaPub, ledgerReads(l)...)
	replicaPub = append(replicaPub,
		jsAPI+"CONSUMER.INFO."+s+".*",
		// The check of the tenants' feed consumers
		// (feed.CheckTenantConsumers): it lists them, and changes
		// nothing.
		jsAPI+"CONSUMER.LIST."+l.FeedStreamName(),
		l.KeyPrefix()+">",
		// The feed relay (serve --feed): create the feed stream, read
		// its last message (the feed allows direct gets, which the
		// client then uses), append events. Its checkpoints live in
		// the snapshot bucket (snapshotReads, snapshotWrites). Not
		// update it: an update could drop the feed's history (a
		// max_msgs of 1), as for the ledger (ledgerAdmin).
		jsAPI+"STREAM.CREATE."+f,
		jsAPI+"STREAM.INFO."+f,
		jsAPI+"STREAM.MSG.GET."+f,
		jsAPI+"DIRECT.GET."+f,
		l.FeedFilter(),
	)
	// Denial records: create the denial stream (not update it, as for
	// the feed), publish the admits it denies, and read them back for
	// the spend report.
	replicaPub = append(replicaPub,
		jsAPI+"STREAM.CREATE."+l.DenialStreamName(),
		l.DenialFilter(),
	)
	replicaPub = append(replicaPub, denialReads(l)...)
	// Alerts: create the alert stream (not update it, as for the feed)
	// and append the alerts (every replica publishes those its fold
	// derives; the stream keeps each once), and read an alert's subject
	// back by its name when it is taken (a direct get of its last
	// message): this alert signed by a trusted key, or something forged
	// to keep it out (internal/alerting).
	alerts := l.AlertFilter()
	replicaPub = append(replicaPub,
		jsAPI+"STREAM.CREATE."+l.AlertStreamName(),
		jsAPI+"STREAM.INFO."+l.AlertStreamName(),
		jsAPI+"DIRECT.GET."+l.AlertStreamName()+"."+alerts,
		alerts,
	)
	replicaPub = append(replicaPub, snapshotReads(l)...)
	replicaPub = append(replicaPub, snapshotWrites(l)...)
	replicaSub := append([]string{l.Prefix() + ">"}, discovery()...)
	replicaSub = append(replicaSub, inbox(Replica)...)

	all := []string{streams.EndpointAdmit, streams.EndpointSettle, streams.EndpointRelease, streams.EndpointVoid,
		streams.EndpointAdmitBatch, streams.EndpointSettleBatch, streams.EndpointReleaseBatch, streams.EndpointBatch,
		streams.EndpointBudgetPut, streams.EndpointBudgetGet, streams.EndpointBudgetList, streams.EndpointBudgetRetire,
		streams.EndpointPricingPut, streams.EndpointPricingGet, streams.EndpointPricingList, streams.EndpointReport}
	// The key table's and the tenant limits' endpoints have no tenant
	// subject (spendgate keys, a gateway run as admin; spendgate
	// tenant-limits).
	plainOnly := slices.Concat(streams.APIKeyEndpoints, streams.TenantLimitsEndpoints, streams.KeyedEndpoints)
	// Finance reads every tenant's book anyway; a tenant's report subject
	// is how it asks a replica for one tenant's report.
	financePub := append(ep(streams.EndpointBudgetGet, streams.EndpointBudgetList, streams.EndpointPricingGet, streams.EndpointPricingList, streams.EndpointReport), tenantEp(streams.EndpointReport)...)
	financePub = append(financePub, ledgerReads(l)...)
	financePub = append(financePub, snapshotReads(l)...)
	financePub = append(financePub, denialReads(l)...)
	// The gateway (spendgate gateway) calls, for the deployment and for
	// every tenant its keys name: the calls of the keys' requests, the
	// HTTP API's reads, and the key table's resolve; never the key
	// table's management, discovery or any stream. Budget and pricing
	// puts only on the keyed subjects (streams.KeyedEndpoints), which the
	// replica answers only for a presented key with admin access: the
	// login alone changes no budget and no price.
	gatewayEps := []string{streams.EndpointAdmit, streams.EndpointSettle, streams.EndpointRelease, streams.EndpointVoid,
		streams.EndpointAdmitBatch, streams.EndpointSettleBatch, streams.EndpointReleaseBatch, streams.EndpointBatch,
		streams.EndpointBudgetGet, streams.EndpointBudgetList,
		streams.EndpointPricingGet, streams.EndpointPricingList, streams.EndpointReport}
	// The held subjects (streams.HeldToken): a call's admit and close,
	// which alone may close the gateway's held reservations. The gateway
	// and the admin (who may close one stuck) publish them; no other role,
	// and no tenant account imports them.
	held := l.HeldPrefix() + ">"
	gatewayPub := slices.Concat(ep(gatewayEps...), tenantEp(gatewayEps...), ep(streams.EndpointAPIKeyResolve), ep(streams.KeyedEndpoints...), []string{held})
	adminPub := slices.Concat(ep(all...), ep(plainOnly...), tenantEp(all...), discovery(), []string{held})
	adminPub = append(adminPub, alertSink(l)...)
	feedDeny := slices.Clone(writes)
	for _, t := range tenants {
		adminPub = append(adminPub, TenantConsumerAdmin(l, t)...)
		feedDeny = append(feedDeny, tenantConsumerGuard(l, t)...)
	}
	return []Role{
		{
			Name:           Replica,
			Description:    "runs `spendgate serve`: ensures and follows the ledger stream, writes its revisions and snapshots, serves every endpoint and $SRV discovery",
			Publish:        Rules{Allow: replicaPub, Deny: slices.Concat(ledgerAdmin(l), feedAdmin(l), denialAdmin(l), streamAdmin(l.AlertStreamName()), snapshotAdmin(l))},
			Subscribe:      Rules{Allow: replicaSub},
			AllowResponses: true,
			InboxPrefix:    InboxPrefix(l, Replica),
		},
		{
			Name:        Service,
			Description: "a calling service: admit, settle, release and void only",
			Publish: Rules{Allow: ep(streams.EndpointAdmit, streams.EndpointSettle, streams.EndpointRelease, streams.EndpointVoid,
				streams.EndpointAdmitBatch, streams.EndpointSettleBatch, streams.EndpointReleaseBatch, streams.EndpointBatch), Deny: writes},
			Subscribe:   Rules{Allow: inbox(Service)},
			InboxPrefix: InboxPrefix(l, Service),
		},
		{
			Name:        Admin,
			Description: "budget administration: every endpoint (budget.put/get/list and report included), for the untenanted deployment and for every tenant, and $SRV discovery; threshold alerts; creates, reads and deletes each tenant's feed consumer (spendgate feed consumer --tenant)",
			Publish:     Rules{Allow: adminPub, Deny: writes},
			Subscribe:   Rules{Allow: append(inbox(Admin), alerts)},
			InboxPrefix: InboxPrefix(l, Admin),
		},
		{
			Name:        Finance,
			Description: "reads the ledger, its snapshots and the denial records and runs `spendgate audit` and `spendgate report`: budget.get/list, report, stream info, ordered consumers, direct gets; writes nothing",
			Publish:     Rules{Allow: financePub, Deny: writes},
			Subscribe:   Rules{Allow: append(inbox(Finance), alerts)},
			InboxPrefix: InboxPrefix(l, Finance),
		},
		{
			Name:        Feed,
			Description: "follows the live event feed: reads the feed stream with durable or ordered consumers and acknowledges; writes nothing else, and may not touch a tenant's feed consumer",
			Publish:     Rules{Allow: feedReads(l), Deny: feedDeny},
			Subscribe:   Rules{Allow: inbox(Feed)},
			InboxPrefix: InboxPrefix(l, Feed),
		},
		{
			Name:        Gateway,
			Description: "runs `spendgate gateway`: its keys' admits, settles, releases and voids and the HTTP API's endpoints, for the deployment and every tenant, and apikey.resolve; budget and pricing puts only on the keyed subjects, which the replica answers only for a presented admin key; not the key table's management, discovery or any stream",
			Publish:     Rules{Allow: gatewayPub, Deny: writes},
			Subscribe:   Rules{Allow: inbox(Gateway)},
			InboxPrefix: InboxPrefix(l, Gateway),
		},
		{
			Name:        Alerts,
			Description: "runs `spendgate alerts webhook`: reads the alert stream with its durable consumer and acknowledges; nothing else, so a sink per tenant, on that tenant's host, holds no login that changes budgets or keys",
			Publish:     Rules{Allow: alertSink(l), Deny: writes},
			Subscribe:   Rules{Allow: inbox(Alerts)},
			InboxPrefix: InboxPrefix(l, Alerts),
		},
	}
}

// ErrUnknownRole: a name that is none of Names.
var ErrUnknownRole = errors.New("roles: unknown role")

// ByName returns the role of layout l called name (ErrUnknownRole if none).
func ByName(l streams.Layout, name string) (Role, error) {
	for _, r := range All(l) {
		if r.Name == name {
			return r, nil
		}
	}
	return Role{}, fmt.Errorf("%w %q (one of %s)", ErrUnknownRole, name, strings.Join(Names, ", "))
}
