package roles

import (
	"fmt"
	"strings"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// DefaultAccount is the account of the replicas and the operator's roles
// when Config renders tenants without an account name.
const DefaultAccount = "SPENDGATE"

// TenantEndpoints are the endpoints a tenant's account imports: admit,
// settle, release (and their batch forms, the mixed one included), void,
// budget.get, budget.list and tenantlimits.get (its own limits and where
// it stands). A tenant does not define
// its own budgets: the operator's admin does, for it (budget.put on
// "<prefix>t.<tenant>.budget.put", spendgate budget put --tenant).
var TenantEndpoints = []string{streams.EndpointAdmit, streams.EndpointSettle, streams.EndpointRelease,
	streams.EndpointVoid, streams.EndpointAdmitBatch, streams.EndpointSettleBatch, streams.EndpointReleaseBatch,
	streams.EndpointBatch, streams.EndpointBudgetGet, streams.EndpointBudgetList, streams.EndpointTenantLimitsGet}

// Tenant is the role of a tenant's users, in the tenant's own account:
// publish to the imported endpoints under their plain subjects
// ("spendgate.admit"), receive replies on _INBOX. The account is the
// tenant's alone, so its inbox needs no private prefix.
func Tenant(l streams.Layout) Role {
	pub := make([]string, len(TenantEndpoints))
	for i, n := range TenantEndpoints {
		pub[i] = l.Endpoint(n)
	}
	return Role{
		Name:        "tenant",
		Description: "a tenant's calling service, in the tenant's own account: admit, settle, release, void, budget.get and budget.list of its own budgets, and tenantlimits.get of its own limits",
		Publish:     Rules{Allow: pub},
		Subscribe:   Rules{Allow: []string{"_INBOX.>"}},
	}
}

// TenantUser is the role of tenant's one user, named after the tenant, in
// its own account: Tenant, and the info, pulls and acks of its feed
// consumer under their local subjects (TenantFeedImports).
func TenantUser(l streams.Layout, tenant string) Role {
	r := Tenant(l)
	r.Publish.Allow = append([]string{}, r.Publish.Allow...)
	for _, im := range TenantFeedImports(l, tenant) {
		r.Publish.Allow = append(r.Publish.Allow, im.To)
	}
	return r
}

// TenantImport is one service import of a tenant's account: the replica
// account's Subject, seen in the tenant's account as To.
type TenantImport struct {
	Subject, To string
}

// TenantImports are the imports of tenant's account: each of
// TenantEndpoints, from "<prefix>t.<tenant>.<endpoint>" in the replicas'
// account to "<prefix><endpoint>" in the tenant's.
//
// This is where the tenant comes from: the server delivers a tenant's
// request on the import's Subject, which the configuration fixes per
// tenant account; the tenant publishes only To, and cannot reach another
// tenant's subject (the replicas' account exports each tenant's subjects to
// that tenant's account alone, TenantExport). The replica reads the tenant
// from the subject.
func TenantImports(l streams.Layout, tenant string) []TenantImport {
	out := make([]TenantImport, len(TenantEndpoints))
	for i, n := range TenantEndpoints {
		out[i] = TenantImport{Subject: l.TenantEndpoint(tenant, n), To: l.Endpoint(n)}
	}
	return out
}

// TenantExport is the service export of the replicas' account for tenant:
// "<prefix>t.<tenant>.>", to the tenant's account only.
func TenantExport(l streams.Layout, tenant string) string { return l.TenantPrefix(tenant) }

// TenantJSPrefix is the JetStream API prefix a tenant's client uses for its
// feed ("spendgate.js.API"; jetstream.NewWithAPIPrefix): its account sees
// the replicas' account's "$JS.API.<...>" under it, apart from its own
// "$JS.API" (which the server answers "JetStream not enabled").
func TenantJSPrefix(l streams.Layout) string { return l.Prefix() + "js.API" }

// TenantFeedImports is the JetStream API a tenant's account imports to
// follow its own live events through its one durable pull consumer on the
// feed stream, streams.TenantFeedConsumer(tenant), filtered to its events
// (feed.TenantConsumerConfig): read its info, pull (MSG.NEXT, whose replies
// are a stream of messages) and acknowledge. Subject is the replicas'
// account's, To the tenant's (under TenantJSPrefix; an acknowledgement
// keeps its subject, the reply subject of the message).
//
// The operator creates the consumer (spendgate feed consumer --tenant),
// not the tenant: the create subject fixes a consumer's name and filter
// but not the rest of its body, and JetStream checks no permission on a
// push consumer's deliver subject, so a tenant that could create it could
// make it a push consumer delivering into the replicas' account. Nothing
// else of the feed stream is reachable: no create, update or delete, no
// other consumer, no message or direct get, no stream info.
func TenantFeedImports(l streams.Layout, tenant string) []TenantImport {
	f, c := l.FeedStreamName(), streams.TenantFeedConsumer(tenant)
	local := TenantJSPrefix(l) + "."
	api := func(rest string) TenantImport {
		return TenantImport{Subject: jsAPI + rest, To: local + rest}
	}
	return []TenantImport{
		api("CONSUMER.INFO." + f + "." + c),
		api("CONSUMER.MSG.NEXT." + f + "." + c),
		{Subject: "$JS.ACK." + f + "." + c + ".>", To: "$JS.ACK." + f + "." + c + ".>"},
	}
}

func checkTenants(account string, tenants []string) error {
	seen := map[string]bool{}
	// The password variable of each user: "my-co" and "my_co" would share
	// SPENDGATE_MY_CO_PASSWORD, so either tenant's password would log in
	// as the other.
	envs := map[string]string{}
	for _, n := range Names {
		envs[PasswordEnv(n)] = n
	}
	for _, t := range tenants {
		if err := events.ValidateTenant(t); err != nil {
			return fmt.Errorf("%w: %v", ErrRender, err)
		}
		if seen[t] {
			return fmt.Errorf("%w: tenant %q appears twice", ErrRender, t)
		}
		if t == account {
			return fmt.Errorf("%w: tenant %q has the name of the replicas' account", ErrRender, t)
		}
		for _, n := range Names {
			// A tenant's user is named after it, and user names are
			// unique across the server.
			if t == n {
				return fmt.Errorf("%w: tenant %q has the name of a role's user", ErrRender, t)
			}
		}
		if other, ok := envs[PasswordEnv(t)]; ok {
			return fmt.Errorf("%w: tenants %q and %q would share the password variable %s; rename one", ErrRender, other, t, PasswordEnv(t))
		}
		envs[PasswordEnv(t)] = t
		seen[t] = true
	}
	return nil
}

// tenantExport is one service export of the replicas' account for a
// tenant; stream is set when a request is answered by a stream of
// messages (a pull, MSG.NEXT).
type tenantExport struct {
	subject string
	stream  bool
}

// tenantExports are the replicas' account's exports for tenant: its
// subjects (TenantExport) and its feed consumer's API (TenantFeedImports).
func tenantExports(l streams.Layout, tenant string) []tenantExport {
	out := []tenantExport{{subject: TenantExport(l, tenant)}}
	for _, im := range TenantFeedImports(l, tenant) {
		out = append(out, tenantExport{subject: im.Subject, stream: strings.Contains(im.Subject, ".MSG.NEXT.")})
	}
	return out
}

// exports writes the replicas' account's export of each tenant's subjects.
func exports(b *strings.Builder, ind string, l streams.Layout, tenants []string) {
	if len(tenants) == 0 {
		return
	}
	fmt.Fprintf(b, "%s# Each tenant's endpoints and its feed consumer, to that tenant's account alone.\n", ind)
	fmt.Fprintf(b, "%sexports = [\n", ind)
	for _, t := range tenants {
		for _, e := range tenantExports(l, t) {
			if e.stream {
				fmt.Fprintf(b, "%s  {service: %q, accounts: [%s], response_type: stream}\n", ind, e.subject, t)
			} else {
				fmt.Fprintf(b, "%s  {service: %q, accounts: [%s]}\n", ind, e.subject, t)
			}
		}
	}
	fmt.Fprintf(b, "%s]\n", ind)
}

// tenantAccount writes tenant's account: its imports from account (the
// endpoints and TenantFeedImports) and one user, named after the tenant, of
// role Tenant, who may also read its feed consumer, and who logs in with its
// client certificate (UserSubject) if certs, with its password otherwise.
func tenantAccount(b *strings.Builder, ind string, l streams.Layout, account, tenant string, certs bool) {
	r := Tenant(l)
	fmt.Fprintf(b, "%s# tenant %s: %s\n", ind, tenant, r.Description)
	fmt.Fprintf(b, "%s%s {\n", ind, tenant)
	fmt.Fprintf(b, "%s  imports = [\n", ind)
	for _, im := range TenantImports(l, tenant) {
		fmt.Fprintf(b, "%s    {service: {account: %s, subject: %q}, to: %q}\n", ind, account, im.Subject, im.To)
	}
	feed := TenantFeedImports(l, tenant)
	for _, im := range feed {
		fmt.Fprintf(b, "%s    {service: {account: %s, subject: %q}, to: %q}\n", ind, account, im.Subject, im.To)
	}
	fmt.Fprintf(b, "%s  ]\n", ind)
	fmt.Fprintf(b, "%s  users = [\n", ind)
	if certs {
		fmt.Fprintf(b, "%s    {user: %q, permissions: {\n", ind, UserSubject(tenant))
	} else {
		fmt.Fprintf(b, "%s    {user: %q, password: $%s, permissions: {\n", ind, tenant, PasswordEnv(tenant))
	}
	u := TenantUser(l, tenant)
	rules(b, ind+"      ", "publish", u.Publish)
	rules(b, ind+"      ", "subscribe", u.Subscribe)
	fmt.Fprintf(b, "%s    }}\n", ind)
	fmt.Fprintf(b, "%s  ]\n", ind)
	fmt.Fprintf(b, "%s}\n", ind)
}
