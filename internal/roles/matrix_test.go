package roles_test

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/roles"
	"github.com/spendgate/spendgate/streams"
)

// The matrix below is the specification, written out by hand for the
// default layout (bucket spendgate, stream KV_spendgate, prefix spendgate.):
// every subject spendgate uses (recorded from a real run, see
// TestRoles_EndToEnd) plus the ones an attacker would try. A subject not
// listed under a role must be refused to it.

var pubSubjects = []string{
	// Ledger stream administration.
	"$JS.API.STREAM.CREATE.KV_spendgate",
	"$JS.API.STREAM.UPDATE.KV_spendgate",
	"$JS.API.STREAM.DELETE.KV_spendgate",
	"$JS.API.STREAM.PURGE.KV_spendgate",
	"$JS.API.STREAM.MSG.DELETE.KV_spendgate",
	"$JS.API.STREAM.RESTORE.KV_spendgate",
	"$JS.API.STREAM.SNAPSHOT.KV_spendgate",
	"$JS.API.CONSUMER.DURABLE.CREATE.KV_spendgate.d1",
	"$JS.API.STREAM.CREATE.OTHER",
	"$JS.API.STREAM.DELETE.OTHER",
	"$JS.API.STREAM.LIST",
	"$JS.API.STREAM.NAMES",
	"$JS.API.INFO",
	// Ledger reads.
	"$JS.API.STREAM.INFO.KV_spendgate",
	"$JS.API.STREAM.MSG.GET.KV_spendgate",
	"$JS.API.DIRECT.GET.KV_spendgate",
	"$JS.API.DIRECT.GET.KV_spendgate.$KV.spendgate.lane.0",
	"$JS.API.CONSUMER.CREATE.KV_spendgate",
	"$JS.API.CONSUMER.CREATE.KV_spendgate.c1",
	"$JS.API.CONSUMER.CREATE.KV_spendgate.c1.$KV.spendgate.lane.0",
	"$JS.API.CONSUMER.MSG.NEXT.KV_spendgate.c1",
	"$JS.API.CONSUMER.INFO.KV_spendgate.c1",
	"$JS.API.CONSUMER.DELETE.KV_spendgate.c1",
	"$JS.API.CONSUMER.LIST.KV_spendgate",
	"$JS.FC.KV_spendgate.c1.x",
	"$JS.ACK.KV_spendgate.c1.1.1.1.1.0",
	// Ledger writes (what `nats kv put` publishes).
	"$KV.spendgate.lane.0",
	"$KV.spendgate.budget.x",
	"$KV.spendgate.budget.org.acme.month",
	// The live event feed: its stream's administration, reads, consumers
	// and acks, and its subjects.
	"$JS.API.STREAM.CREATE.spendgate_feed",
	"$JS.API.STREAM.UPDATE.spendgate_feed",
	"$JS.API.STREAM.DELETE.spendgate_feed",
	"$JS.API.STREAM.PURGE.spendgate_feed",
	"$JS.API.STREAM.MSG.DELETE.spendgate_feed",
	"$JS.API.CONSUMER.DURABLE.CREATE.spendgate_feed.billing",
	"$JS.API.STREAM.INFO.spendgate_feed",
	"$JS.API.STREAM.MSG.GET.spendgate_feed",
	"$JS.API.DIRECT.GET.spendgate_feed",
	"$JS.API.CONSUMER.CREATE.spendgate_feed",
	"$JS.API.CONSUMER.CREATE.spendgate_feed.billing",
	"$JS.API.CONSUMER.CREATE.spendgate_feed.billing.spendgate.feed.v1.>",
	"$JS.API.CONSUMER.INFO.spendgate_feed.billing",
	"$JS.API.CONSUMER.MSG.NEXT.spendgate_feed.billing",
	"$JS.API.CONSUMER.DELETE.spendgate_feed.billing",
	"$JS.API.CONSUMER.LIST.spendgate_feed",
	"$JS.API.CONSUMER.NAMES.spendgate_feed",
	"$JS.ACK.spendgate_feed.billing.1.1.1.1.0",
	"$JS.FC.spendgate_feed.c1.x",
	"spendgate.feed.v1.reservation.opened.v1.team.search",
	"spendgate.feed.v1.reservation.opened.v1.t.acme.team.search",
	// The denial records: their stream's administration, reads and
	// subjects.
	"$JS.API.STREAM.CREATE.spendgate_denials",
	"$JS.API.STREAM.UPDATE.spendgate_denials",
	"$JS.API.STREAM.DELETE.spendgate_denials",
	"$JS.API.STREAM.PURGE.spendgate_denials",
	"$JS.API.STREAM.MSG.DELETE.spendgate_denials",
	"$JS.API.CONSUMER.DURABLE.CREATE.spendgate_denials.d1",
	"$JS.API.STREAM.INFO.spendgate_denials",
	"$JS.API.STREAM.MSG.GET.spendgate_denials",
	"$JS.API.DIRECT.GET.spendgate_denials",
	"$JS.API.CONSUMER.CREATE.spendgate_denials",
	"$JS.API.CONSUMER.CREATE.spendgate_denials.c1",
	"$JS.API.CONSUMER.CREATE.spendgate_denials.c1.spendgate.denial.v1.>",
	"$JS.API.CONSUMER.MSG.NEXT.spendgate_denials.c1",
	"$JS.API.CONSUMER.DELETE.spendgate_denials.c1",
	"$JS.FC.spendgate_denials.c1.x",
	"spendgate.denial.v1.team.search",
	"spendgate.denial.v1.t.acme.team.search",
	// The alerts: their subjects, and reads of the alert stream (the
	// replica reads an alert's subject back by its name).
	"spendgate.alert.v1.team.search.month.2026-12._.0_8.0",
	"$JS.API.DIRECT.GET.spendgate_alerts.spendgate.alert.v1.team.search.month.2026-12._.0_8.0",
	"$JS.API.DIRECT.GET.spendgate_alerts",
	"$JS.API.STREAM.MSG.GET.spendgate_alerts",
	// The webhook sink (the alerts role, and the admin): the stream's
	// info, its durable consumer (one per tenant too), pulls and acks.
	"$JS.API.STREAM.INFO.spendgate_alerts",
	"$JS.API.CONSUMER.CREATE.spendgate_alerts.spendgate-alerts-webhook",
	"$JS.API.CONSUMER.CREATE.spendgate_alerts.spendgate-alerts-webhook-acme.spendgate.alert.v1.t.acme.>",
	"$JS.API.CONSUMER.INFO.spendgate_alerts.spendgate-alerts-webhook",
	"$JS.API.CONSUMER.MSG.NEXT.spendgate_alerts.spendgate-alerts-webhook",
	"$JS.ACK.spendgate_alerts.spendgate-alerts-webhook.1.1.1.1.0",
	// Service endpoints.
	"spendgate.admit",
	"spendgate.settle",
	"spendgate.release",
	"spendgate.void",
	"spendgate.budget.put",
	"spendgate.budget.get",
	"spendgate.budget.list",
	"spendgate.report",
	"spendgate.admit.batch",
	"spendgate.pricing.put",
	"spendgate.pricing.list",
	// The key table: the gateway resolves a presented key; only the admin
	// manages and lists them.
	"spendgate.apikey.resolve",
	// Budget and pricing puts on behalf of a presented key: the gateway
	// (and the admin) publish them; the replica checks the key.
	"spendgate.keyed.budget.put",
	"spendgate.keyed.pricing.put",
	"spendgate.apikey.create",
	"spendgate.apikey.rotate",
	"spendgate.apikey.update",
	"spendgate.apikey.list",
	// A tenant's limits: only the admin sets them, on the plain subject.
	"spendgate.tenantlimits.put",
	"spendgate.tenantlimits.get",
	"spendgate.other",
	// A tenant's endpoints (a tenant's account reaches them through its
	// imports; in this account only the admin acts for a tenant).
	"spendgate.t.acme.admit",
	"spendgate.t.acme.budget.put",
	"spendgate.t.acme.budget.list",
	"spendgate.t.acme.report",
	"spendgate.t.acme.pricing.list",
	// The key table and the tenant limits have no tenant subject: none
	// is granted.
	"spendgate.t.acme.apikey.create",
	"spendgate.t.acme.tenantlimits.put",
	"spendgate.t.acme.other",
	// The held subjects: only the gateway and the admin may close a
	// gateway's held reservation (a caller holding one of its keys may
	// not).
	"spendgate.held.settle",
	"spendgate.held.release",
	"spendgate.held.void",
	"spendgate.held.t.acme.settle",
	"spendgate.held.t.acme.release.batch",
	// Discovery.
	"$SRV.PING", "$SRV.PING.spendgate", "$SRV.PING.spendgate.id1",
	"$SRV.INFO", "$SRV.INFO.spendgate", "$SRV.INFO.spendgate.id1",
	"$SRV.STATS", "$SRV.STATS.spendgate", "$SRV.STATS.spendgate.id1",
	// Inboxes: nobody publishes into another's inbox unasked.
	"_INBOX.x",
	"_INBOX_spendgate_replica.x",
	"_INBOX_spendgate_service.x",
	"_INBOX_spendgate_admin.x",
	"_INBOX_spendgate_finance.x",
	"_INBOX_spendgate_feed.x",
	"_INBOX_spendgate_gateway.x",
	"_INBOX_spendgate_alerts.x",
	"anything.else",
}

var srv = []string{"$SRV.PING", "$SRV.PING.spendgate", "$SRV.PING.spendgate.id1",
	"$SRV.INFO", "$SRV.INFO.spendgate", "$SRV.INFO.spendgate.id1",
	"$SRV.STATS", "$SRV.STATS.spendgate", "$SRV.STATS.spendgate.id1"}

var ledgerRead = []string{
	"$JS.API.STREAM.INFO.KV_spendgate",
	"$JS.API.STREAM.MSG.GET.KV_spendgate",
	"$JS.API.DIRECT.GET.KV_spendgate",
	"$JS.API.DIRECT.GET.KV_spendgate.$KV.spendgate.lane.0",
	"$JS.API.CONSUMER.CREATE.KV_spendgate",
	"$JS.API.CONSUMER.CREATE.KV_spendgate.c1",
	"$JS.API.CONSUMER.CREATE.KV_spendgate.c1.$KV.spendgate.lane.0",
	"$JS.API.CONSUMER.MSG.NEXT.KV_spendgate.c1",
	"$JS.API.CONSUMER.DELETE.KV_spendgate.c1",
	"$JS.FC.KV_spendgate.c1.x",
}

// feedRead has no CONSUMER.CREATE.spendgate_feed: that form takes the
// consumer's name from the body, so it could update a tenant's consumer.
var feedRead = []string{
	"$JS.API.STREAM.INFO.spendgate_feed",
	"$JS.API.STREAM.MSG.GET.spendgate_feed",
	"$JS.API.DIRECT.GET.spendgate_feed",
	"$JS.API.CONSUMER.CREATE.spendgate_feed.billing",
	"$JS.API.CONSUMER.CREATE.spendgate_feed.billing.spendgate.feed.v1.>",
	"$JS.API.CONSUMER.INFO.spendgate_feed.billing",
	"$JS.API.CONSUMER.MSG.NEXT.spendgate_feed.billing",
	"$JS.API.CONSUMER.DELETE.spendgate_feed.billing",
	"$JS.ACK.spendgate_feed.billing.1.1.1.1.0",
	"$JS.FC.spendgate_feed.c1.x",
}

var denialRead = []string{
	"$JS.API.STREAM.INFO.spendgate_denials",
	"$JS.API.STREAM.MSG.GET.spendgate_denials",
	"$JS.API.DIRECT.GET.spendgate_denials",
	"$JS.API.CONSUMER.CREATE.spendgate_denials",
	"$JS.API.CONSUMER.CREATE.spendgate_denials.c1",
	"$JS.API.CONSUMER.CREATE.spendgate_denials.c1.spendgate.denial.v1.>",
	"$JS.API.CONSUMER.MSG.NEXT.spendgate_denials.c1",
	"$JS.API.CONSUMER.DELETE.spendgate_denials.c1",
	"$JS.FC.spendgate_denials.c1.x",
}

var wantPub = map[string][]string{
	roles.Replica: concat(
		[]string{"$JS.API.STREAM.CREATE.KV_spendgate"},
		ledgerRead,
		[]string{"$JS.API.CONSUMER.INFO.KV_spendgate.c1",
			"$KV.spendgate.lane.0", "$KV.spendgate.budget.x", "$KV.spendgate.budget.org.acme.month"},
		[]string{"$JS.API.STREAM.CREATE.spendgate_feed", "$JS.API.CONSUMER.LIST.spendgate_feed",
			"$JS.API.STREAM.INFO.spendgate_feed", "$JS.API.STREAM.MSG.GET.spendgate_feed", "$JS.API.DIRECT.GET.spendgate_feed",
			"spendgate.feed.v1.reservation.opened.v1.team.search",
			"spendgate.feed.v1.reservation.opened.v1.t.acme.team.search"},
		[]string{"$JS.API.STREAM.CREATE.spendgate_denials",
			"spendgate.denial.v1.team.search", "spendgate.denial.v1.t.acme.team.search"},
		denialRead,
		[]string{"spendgate.alert.v1.team.search.month.2026-12._.0_8.0",
			"$JS.API.DIRECT.GET.spendgate_alerts.spendgate.alert.v1.team.search.month.2026-12._.0_8.0",
			"$JS.API.STREAM.INFO.spendgate_alerts"}),
	roles.Service: {"spendgate.admit", "spendgate.settle", "spendgate.release", "spendgate.void", "spendgate.admit.batch"},
	roles.Admin: concat([]string{"spendgate.admit", "spendgate.settle", "spendgate.release", "spendgate.void",
		"spendgate.budget.put", "spendgate.budget.get", "spendgate.budget.list", "spendgate.report",
		"spendgate.admit.batch", "spendgate.pricing.put", "spendgate.pricing.list",
		"spendgate.apikey.resolve", "spendgate.apikey.create", "spendgate.apikey.rotate", "spendgate.apikey.update", "spendgate.apikey.list",
		"spendgate.keyed.budget.put", "spendgate.keyed.pricing.put",
		"spendgate.tenantlimits.put", "spendgate.tenantlimits.get",
		"spendgate.t.acme.admit", "spendgate.t.acme.budget.put", "spendgate.t.acme.budget.list", "spendgate.t.acme.report",
		"spendgate.t.acme.pricing.list"}, held, srv, alertSink),
	roles.Finance: concat([]string{"spendgate.budget.get", "spendgate.budget.list", "spendgate.report", "spendgate.t.acme.report",
		"spendgate.pricing.list"}, ledgerRead, denialRead),
	roles.Feed: feedRead,
	// The gateway: what its keys' calls and the HTTP API send, for the
	// deployment and each tenant, and the key lookup; no key management
	// (a gateway's host could otherwise mint or rotate keys), no
	// discovery, no stream, and budget and pricing puts only on the keyed
	// subjects (its login alone changes no budget and no price).
	roles.Gateway: {"spendgate.admit", "spendgate.settle", "spendgate.release", "spendgate.void",
		"spendgate.budget.get", "spendgate.budget.list", "spendgate.report",
		"spendgate.admit.batch", "spendgate.pricing.list", "spendgate.apikey.resolve",
		"spendgate.keyed.budget.put", "spendgate.keyed.pricing.put",
		"spendgate.t.acme.admit", "spendgate.t.acme.budget.list", "spendgate.t.acme.report",
		"spendgate.t.acme.pricing.list", "spendgate.held.settle", "spendgate.held.release", "spendgate.held.void",
		"spendgate.held.t.acme.settle", "spendgate.held.t.acme.release.batch"},
	// The alert sink: the alert stream's consumer, pulls and acks, and
	// nothing else (no budget, key or stream of any kind).
	roles.Alerts: alertSink,
}

// alertSink is what the webhook sink publishes (the alerts role, and the
// admin).
var alertSink = []string{"$JS.API.STREAM.INFO.spendgate_alerts",
	"$JS.API.CONSUMER.CREATE.spendgate_alerts.spendgate-alerts-webhook",
	"$JS.API.CONSUMER.CREATE.spendgate_alerts.spendgate-alerts-webhook-acme.spendgate.alert.v1.t.acme.>",
	"$JS.API.CONSUMER.INFO.spendgate_alerts.spendgate-alerts-webhook",
	"$JS.API.CONSUMER.MSG.NEXT.spendgate_alerts.spendgate-alerts-webhook",
	"$JS.ACK.spendgate_alerts.spendgate-alerts-webhook.1.1.1.1.0"}

// held are the held subjects of pubSubjects.
var held = []string{"spendgate.held.settle", "spendgate.held.release", "spendgate.held.void",
	"spendgate.held.t.acme.settle", "spendgate.held.t.acme.release.batch"}

// subChecks are (filter, a subject it matches) pairs.
var subChecks = [][2]string{
	{"spendgate.admit", "spendgate.admit"},
	{"spendgate.settle", "spendgate.settle"},
	{"spendgate.release", "spendgate.release"},
	{"spendgate.budget.put", "spendgate.budget.put"},
	{"spendgate.budget.get", "spendgate.budget.get"},
	{"spendgate.budget.list", "spendgate.budget.list"},
	{"spendgate.report", "spendgate.report"},
	{"spendgate.>", "spendgate.admit"},
	{"spendgate.t.*.admit", "spendgate.t.acme.admit"},
	{"$SRV.PING", "$SRV.PING"}, {"$SRV.PING.spendgate", "$SRV.PING.spendgate"}, {"$SRV.PING.spendgate.id1", "$SRV.PING.spendgate.id1"},
	{"$SRV.INFO", "$SRV.INFO"}, {"$SRV.INFO.spendgate", "$SRV.INFO.spendgate"}, {"$SRV.INFO.spendgate.id1", "$SRV.INFO.spendgate.id1"},
	{"$SRV.STATS", "$SRV.STATS"}, {"$SRV.STATS.spendgate", "$SRV.STATS.spendgate"}, {"$SRV.STATS.spendgate.id1", "$SRV.STATS.spendgate.id1"},
	{"$KV.spendgate.lane.0", "$KV.spendgate.lane.0"},
	{"$KV.spendgate.>", "$KV.spendgate.budget.x"},
	{"$JS.API.STREAM.INFO.KV_spendgate", "$JS.API.STREAM.INFO.KV_spendgate"},
	{"$JS.API.>", "$JS.API.STREAM.INFO.KV_spendgate"},
	{"_INBOX.x", "_INBOX.x"},
	{"_INBOX.>", "_INBOX.x"},
	{"_INBOX_spendgate_replica.x", "_INBOX_spendgate_replica.x"},
	{"_INBOX_spendgate_service.x", "_INBOX_spendgate_service.x"},
	{"_INBOX_spendgate_admin.x", "_INBOX_spendgate_admin.x"},
	{"_INBOX_spendgate_finance.x", "_INBOX_spendgate_finance.x"},
	{"_INBOX_spendgate_finance.>", "_INBOX_spendgate_finance.x"},
	{"_INBOX_spendgate_feed.x", "_INBOX_spendgate_feed.x"},
	{"_INBOX_spendgate_gateway.x", "_INBOX_spendgate_gateway.x"},
	{"_INBOX_spendgate_alerts.x", "_INBOX_spendgate_alerts.x"},
	{">", "anything.else"},
}

var wantSub = map[string][]string{
	roles.Replica: concat([]string{"spendgate.admit", "spendgate.settle", "spendgate.release", "spendgate.budget.put",
		"spendgate.budget.get", "spendgate.budget.list", "spendgate.report", "spendgate.>", "spendgate.t.*.admit"}, srv, []string{"_INBOX_spendgate_replica.x"}),
	roles.Service: {"_INBOX_spendgate_service.x"},
	roles.Admin:   {"_INBOX_spendgate_admin.x"},
	roles.Finance: {"_INBOX_spendgate_finance.x", "_INBOX_spendgate_finance.>"},
	roles.Feed:    {"_INBOX_spendgate_feed.x"},
	roles.Gateway: {"_INBOX_spendgate_gateway.x"},
	roles.Alerts:  {"_INBOX_spendgate_alerts.x"},
}

func concat(parts ...[]string) []string { return slices.Concat(parts...) }

// matrixTenants are the tenants the matrix's layout serves.
var matrixTenants = []string{"acme", "globex"}

// The administration matrix: every stream spendgate keeps and every kind of
// consumer on it, with every JetStream API call that creates, changes,
// deletes or drives them. Each role's expectation below is written out by
// hand; every call not listed is refused.
var adminStreams = map[string]string{ // stream -> a filter of its subjects
	"KV_spendgate":            "$KV.spendgate.lane.0",
	"spendgate_feed":          "spendgate.feed.v1.>",
	"spendgate_denials":       "spendgate.denial.v1.>",
	"OBJ_spendgate_snapshots": "$O.spendgate_snapshots.>",
}

var streamOps = []string{"CREATE", "UPDATE", "DELETE", "PURGE", "MSG.DELETE", "RESTORE", "SNAPSHOT", "LEADER.STEPDOWN", "PEER.REMOVE"}

// adminConsumers are the consumers of each stream the matrix names: c1 (any
// client's), on the feed also billing (a feed client's durable) and each
// tenant's.
var adminConsumers = map[string][]string{
	"KV_spendgate":            {"c1"},
	"spendgate_feed":          {"c1", "billing", "t-acme", "t-globex"},
	"spendgate_denials":       {"c1"},
	"OBJ_spendgate_snapshots": {"c1"},
}

// consumerOps names each consumer call; consumerSubject spells it.
var consumerOps = []string{"create", "create-filtered", "create-wide", "create-legacy", "create-durable", "delete",
	"pause", "unpin", "stepdown", "next", "info", "ack"}

func consumerSubject(stream, consumer, op string) string {
	filter := adminStreams[stream]
	if t, ok := strings.CutPrefix(consumer, "t-"); ok {
		filter = "spendgate.feed.v1.*.*.*.t." + t + ".>"
	}
	api := "$JS.API.CONSUMER."
	switch op {
	case "create":
		return api + "CREATE." + stream + "." + consumer
	case "create-filtered":
		return api + "CREATE." + stream + "." + consumer + "." + filter
	case "create-wide": // a known attack: a tenant's consumer over the whole stream
		return api + "CREATE." + stream + "." + consumer + "." + strings.TrimSuffix(adminStreams[stream], ".lane.0") + ">"
	case "create-legacy": // the name (and the filter) in the body only
		return api + "CREATE." + stream
	case "create-durable":
		return api + "DURABLE.CREATE." + stream + "." + consumer
	case "delete":
		return api + "DELETE." + stream + "." + consumer
	case "pause":
		return api + "PAUSE." + stream + "." + consumer
	case "unpin":
		return api + "UNPIN." + stream + "." + consumer
	case "stepdown":
		return api + "LEADER.STEPDOWN." + stream + "." + consumer
	case "next":
		return api + "MSG.NEXT." + stream + "." + consumer
	case "info":
		return api + "INFO." + stream + "." + consumer
	case "ack":
		return "$JS.ACK." + stream + "." + consumer + ".1.1.1.1.0"
	}
	panic(op)
}

// adminSubjects is every subject of the administration matrix.
func adminSubjects() []string {
	var out []string
	for _, st := range slices.Sorted(maps.Keys(adminStreams)) {
		for _, op := range streamOps {
			out = append(out, "$JS.API.STREAM."+op+"."+st)
		}
		for _, c := range adminConsumers[st] {
			for _, op := range consumerOps {
				out = append(out, consumerSubject(st, c, op))
			}
		}
	}
	return out
}

// allows is what a role may do in the administration matrix: stream ->
// the stream ops, and "stream/consumer" -> the consumer ops.
type allows map[string][]string

var readOps = []string{"create", "create-filtered", "create-wide", "create-legacy", "delete", "next"}

var wantAdmin = map[string]allows{
	roles.Replica: {
		"KV_spendgate":               {"CREATE"},
		"KV_spendgate/c1":            append([]string{"info"}, readOps...),
		"spendgate_feed":             {"CREATE"},
		"spendgate_denials":          {"CREATE"},
		"spendgate_denials/c1":       readOps,
		"OBJ_spendgate_snapshots":    {"CREATE", "PURGE"},
		"OBJ_spendgate_snapshots/c1": append([]string{"info"}, readOps...),
	},
	roles.Service: {},
	roles.Admin: {
		"spendgate_feed/t-acme":   {"info", "create-filtered", "delete"},
		"spendgate_feed/t-globex": {"info", "create-filtered", "delete"},
	},
	roles.Finance: {
		"KV_spendgate/c1":            readOps,
		"spendgate_denials/c1":       readOps,
		"OBJ_spendgate_snapshots/c1": readOps,
	},
	roles.Feed: {
		"spendgate_feed/c1":      {"create", "create-filtered", "create-wide", "delete", "next", "info", "ack"},
		"spendgate_feed/billing": {"create", "create-filtered", "create-wide", "delete", "next", "info", "ack"},
	},
	roles.Gateway: {},
}

// wantAdminPub is whether role may publish subject of the administration
// matrix, per wantAdmin.
func wantAdminPub(role, subject string) (want, ok bool) {
	for st, filter := range adminStreams {
		_ = filter
		for _, op := range streamOps {
			if subject == "$JS.API.STREAM."+op+"."+st {
				return slices.Contains(wantAdmin[role][st], op), true
			}
		}
		for _, c := range adminConsumers[st] {
			for _, op := range consumerOps {
				if subject == consumerSubject(st, c, op) {
					if slices.Contains(wantAdmin[role][st+"/"+c], op) {
						return true, true
					}
					// The legacy create names no consumer: a role
					// that may use it on one consumer of the stream
					// may on all.
					want = false
					if op == "create-legacy" {
						for _, c2 := range adminConsumers[st] {
							want = want || slices.Contains(wantAdmin[role][st+"/"+c2], op)
						}
					}
					if op == "create-wide" && st == "KV_spendgate" {
						// "$KV.spendgate.>" is also the stream's
						// filter: the same rule as create-filtered.
						want = want || slices.Contains(wantAdmin[role][st+"/"+c], "create-filtered")
					}
					return want, true
				}
			}
		}
	}
	return false, false
}

// matrixConfig renders the default roles and users (passwords from the
// environment, as in production) plus the observer, in the authorization
// form or, if account is set, the accounts form.
func matrixConfig(t *testing.T, l streams.Layout, account string) string {
	t.Helper()
	exportPasswords(t, roles.Names...)
	rs := append(roles.All(l, matrixTenants...), observerRole)
	us := append(roles.DefaultUsers(), roles.User{Name: "observer", Role: "observer", Password: password("observer")})
	var conf string
	var err error
	if account == "" {
		conf, err = roles.Authorization(rs, us)
	} else {
		conf, err = roles.Accounts(account, rs, us)
	}
	require.NoError(t, err)
	for _, n := range roles.Names {
		require.NotContains(t, conf, password(n), "the rendered config must hold no secret")
	}
	return conf
}

// TestRoles_Matrix checks every role against every subject on a real
// nats-server loaded with the rendered configuration (without JetStream, so
// a permitted $JS.API publish reaches the observer and changes nothing). It
// fails on any unexpected allow or deny, and lists them all. Both rendered
// forms are checked.
func TestRoles_Matrix(t *testing.T) {
	t.Parallel()
	for _, account := range []string{"", "SPENDGATE"} {
		t.Run("account="+account, func(t *testing.T) { t.Parallel(); checkMatrix(t, account) }) // a server each
	}
}

func checkMatrix(t *testing.T, account string) {
	l := streams.Default()
	s := startConf(t, matrixConfig(t, l, account), false, nil)
	obs := dial(t, s, l, "observer", "")

	var unexpected []string
	for _, role := range roles.Names {
		id := dialRole(t, s, l, role)
		for _, subj := range pubSubjects {
			want := slices.Contains(wantPub[role], subj)
			if got := canPublish(t, obs, id, subj); got != want {
				unexpected = append(unexpected, fmt.Sprintf("%-8s publish   %-60s allowed=%v want %v", role, subj, got, want))
			}
		}
		for _, subj := range adminSubjects() {
			if slices.Contains(pubSubjects, subj) {
				// Checked above: both tables must agree.
				if w, _ := wantAdminPub(role, subj); w != slices.Contains(wantPub[role], subj) {
					unexpected = append(unexpected, fmt.Sprintf("%-8s the two tables disagree on %s", role, subj))
				}
				continue
			}
			want, _ := wantAdminPub(role, subj)
			if got := canPublish(t, obs, id, subj); got != want {
				unexpected = append(unexpected, fmt.Sprintf("%-8s publish   %-60s allowed=%v want %v", role, subj, got, want))
			}
		}
		for _, c := range subChecks {
			want := slices.Contains(wantSub[role], c[0])
			if got := canSubscribe(t, obs, id, c[0], c[1], false); got != want {
				unexpected = append(unexpected, fmt.Sprintf("%-8s subscribe %-60s allowed=%v want %v", role, c[0], got, want))
			}
		}
		if role == roles.Replica {
			// The service endpoints are served in queue group "q".
			for _, ep := range [][2]string{{"spendgate.admit", "spendgate.admit"}, {"spendgate.budget.put", "spendgate.budget.put"},
				{"spendgate.t.*.admit", "spendgate.t.acme.admit"}} {
				if !canSubscribe(t, obs, id, ep[0], ep[1], true) {
					unexpected = append(unexpected, fmt.Sprintf("%-8s queue-sub %-60s refused", role, ep[0]))
				}
			}
		}
	}
	sort.Strings(unexpected)
	require.Empty(t, unexpected, "unexpected allows/denies:\n%s", strings.Join(unexpected, "\n"))
	// Every expectation names a subject the matrix checks.
	for role, subs := range wantPub {
		for _, s := range subs {
			require.Contains(t, pubSubjects, s, role)
		}
	}
	if os.Getenv("ROLES_PRINT") != "" {
		conf, _ := roles.Authorization(roles.All(l), roles.DefaultUsers())
		t.Log("\n" + conf)
	}
}

// wantTenantPub is what a tenant's user (acme) may publish in its own
// account, by hand: the imported endpoints under their plain subjects, and
// the info, pulls and acks of its own feed consumer under the tenant's
// JetStream prefix.
var wantTenantPub = []string{
	"spendgate.admit", "spendgate.settle", "spendgate.release", "spendgate.void", "spendgate.admit.batch",
	"spendgate.budget.get", "spendgate.budget.list", "spendgate.tenantlimits.get",
	"spendgate.js.API.CONSUMER.INFO.spendgate_feed.t-acme",
	"spendgate.js.API.CONSUMER.MSG.NEXT.spendgate_feed.t-acme",
	"$JS.ACK.spendgate_feed.t-acme.1.1.1.1.0",
}

// TestRoles_MatrixTenant checks a tenant's user the way TestRoles_Matrix
// checks the operator's roles: in an account of its own with the observer,
// against every subject of both matrices and each of them under the
// tenant's JetStream prefix (where its account sees the replicas' API). It
// may publish wantTenantPub and nothing else: no stream or consumer of
// anyone's is created, changed or deleted by it, its own included.
func TestRoles_MatrixTenant(t *testing.T) {
	t.Parallel()
	l := streams.Default()
	u := roles.TenantUser(l, "acme")
	conf, err := roles.Accounts("acme", []roles.Role{u, observerRole}, []roles.User{
		{Name: "acme", Role: u.Name, Password: password("acme")},
		{Name: "observer", Role: "observer", Password: password("observer")}})
	require.NoError(t, err)
	s := startConf(t, conf, false, nil)
	obs := dial(t, s, l, "observer", "")
	id := dial(t, s, l, "acme", "")
	var subjects []string
	for _, subj := range slices.Concat(pubSubjects, adminSubjects()) {
		subjects = append(subjects, subj)
		if rest, ok := strings.CutPrefix(subj, "$JS.API."); ok {
			subjects = append(subjects, roles.TenantJSPrefix(l)+"."+rest)
		}
	}
	slices.Sort(subjects)
	var unexpected []string
	for _, subj := range slices.Compact(subjects) {
		want := slices.Contains(wantTenantPub, subj)
		if got := canPublish(t, obs, id, subj); got != want {
			unexpected = append(unexpected, fmt.Sprintf("acme publish %-70s allowed=%v want %v", subj, got, want))
		}
	}
	require.Empty(t, unexpected, "unexpected allows/denies:\n%s", strings.Join(unexpected, "\n"))
	for _, subj := range wantTenantPub {
		require.Contains(t, subjects, subj)
	}
}
