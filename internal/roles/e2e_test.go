package roles_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/alerting"
	"github.com/spendgate/spendgate/internal/fakellm"
	"github.com/spendgate/spendgate/internal/feed"
	"github.com/spendgate/spendgate/internal/gateway"
	"github.com/spendgate/spendgate/internal/httpapi"
	"github.com/spendgate/spendgate/internal/natsconn"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/roles"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// startReplica runs a spendgate replica on id's connection until t ends.
func startReplica(t *testing.T, id *ident, l streams.Layout) *replica.Replica {
	t.Helper()
	js, err := jetstream.New(id.nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := replica.Start(ctx, id.nc, js, replica.Config{Layout: l, SweepInterval: 100 * time.Millisecond, Feed: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Stop() })
	return r
}

func newClient(t *testing.T, id *ident, l streams.Layout) *client.Client {
	t.Helper()
	c, err := client.New(id.nc, client.WithPrefix(l.Prefix()), client.WithTimeout(time.Second), client.WithRetries(1))
	require.NoError(t, err)
	return c
}

// scenario is everything spendgate's callers do, each under its role:
// budgets by admin, admit/settle/release and an expiry by service,
// discovery by admin, reads and audits by finance. It returns the
// finance projector's state.
func scenario(t *testing.T, l streams.Layout, ids map[string]*ident) *projector.State {
	t.Helper()
	ctx := context.Background()
	admin, svc, fin := newClient(t, ids[roles.Admin], l), newClient(t, ids[roles.Service], l), newClient(t, ids[roles.Finance], l)

	_, err := admin.PutBudget(ctx, events.BudgetPutRequest{Scope: "org:acme", Period: "lifetime", Limit: "10", Unit: "USD"})
	require.NoError(t, err)
	_, err = admin.GetBudget(ctx, events.BudgetGetRequest{Scope: "org:acme", Period: "lifetime"})
	require.NoError(t, err)
	_, err = admin.ListBudgets(ctx, "org")
	require.NoError(t, err)
	for _, subj := range []string{"$SRV.PING", "$SRV.INFO." + streams.ServiceName, "$SRV.STATS." + streams.ServiceName} {
		msg, err := ids[roles.Admin].nc.Request(subj, nil, waitBound)
		require.NoError(t, err, subj)
		require.Contains(t, string(msg.Data), streams.ServiceName)
	}

	res, err := svc.Admit(ctx, events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: "1"})
	require.NoError(t, err)
	_, err = res.Settle(ctx, "0.5")
	require.NoError(t, err)
	res, err = svc.Admit(ctx, events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: "1"})
	require.NoError(t, err)
	_, err = res.Release(ctx)
	require.NoError(t, err)
	// One reservation left to expire: the sweeper releases it.
	_, err = svc.Admit(ctx, events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: "2", TTL: "1s"})
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := fin.GetBudget(ctx, events.BudgetGetRequest{Scope: "org:acme", Period: "lifetime"})
		require.NoError(t, err)
		if v.Open == 0 {
			require.Equal(t, "0.5", v.Spent)
			break
		}
		require.True(t, time.Now().Before(deadline), "the expired reservation was not swept")
		time.Sleep(50 * time.Millisecond)
	}
	_, err = fin.ListBudgets(ctx, "org")
	require.NoError(t, err)

	js, err := jetstream.New(ids[roles.Finance].nc)
	require.NoError(t, err)
	st, err := projector.New(js, l).CatchUp(ctx)
	require.NoError(t, err)
	rep, err := projector.Check(ctx, js, l)
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.String())
	_, err = projector.New(js, l).ReplayUntil(ctx, time.Now())
	require.NoError(t, err)
	followFeed(t, l, ids[roles.Feed])
	return st
}

// followFeed reads the live event feed as the feed role does: the
// scenario's seven events (a budget, three opens, a settle and two
// releases) through a durable consumer with acknowledged pulls, then an
// ordered consumer and a message get.
func followFeed(t *testing.T, l streams.Layout, id *ident) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(id.nc)
	require.NoError(t, err)
	const events = 7
	var stream jetstream.Stream
	deadline := time.Now().Add(10 * time.Second)
	for {
		stream, err = js.Stream(ctx, l.FeedStreamName())
		if err == nil && stream.CachedInfo().State.Msgs >= events {
			break
		}
		require.True(t, time.Now().Before(deadline), "the relay did not fill the feed: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, feed.ConsumerConfig(l, "billing"))
	require.NoError(t, err)
	var cursor feed.Cursor
	for range events {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		m, err := feed.Decode(msg.Data())
		require.NoError(t, err)
		require.True(t, cursor.Next(m))
		require.NoError(t, msg.DoubleAck(ctx))
	}
	oc, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	msg, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second))
	require.NoError(t, err)
	_, err = feed.Decode(msg.Data())
	require.NoError(t, err)
	_, err = stream.GetMsg(ctx, 1)
	require.NoError(t, err)
}

// refused asserts that publishing to subject as id is refused with a
// permission violation (and so never reaches the server's JetStream).
func refused(t *testing.T, id *ident, subject string) {
	t.Helper()
	id.drainErrs()
	require.NoError(t, id.nc.Publish(subject, []byte(`{"limit":"1000000"}`)))
	require.NoError(t, id.nc.Flush())
	deadline := time.After(waitBound)
	for {
		select {
		case err := <-id.errs:
			if violated(err, "Publish", subject) {
				return
			}
		case <-deadline:
			t.Fatalf("%s: publish to %s was not refused", id.role, subject)
		}
	}
}

// TestRoles_EndToEnd runs spendgate on a nats-server loaded with the
// rendered roles: a replica under the replica identity serves every caller
// under its own identity, and every forbidden write is refused while the
// ledger stays as it was. It runs on the default layout and on one with
// another bucket and prefix.
func TestRoles_EndToEnd(t *testing.T) {
	t.Parallel()
	other, err := streams.New(streams.Config{Bucket: "ledger2", Prefix: "acme.spend."})
	require.NoError(t, err)
	for _, l := range []streams.Layout{streams.Default(), other} {
		t.Run(l.Bucket(), func(t *testing.T) { t.Parallel(); endToEnd(t, l) }) // a server each
	}
}

func endToEnd(t *testing.T, l streams.Layout) {
	exportPasswords(t, roles.Names...)
	conf, err := roles.Authorization(roles.All(l), roles.DefaultUsers())
	require.NoError(t, err)
	s := startConf(t, conf, true, nil)
	ids := map[string]*ident{}
	for _, n := range roles.Names {
		ids[n] = dialRole(t, s, l, n)
	}
	r := startReplica(t, ids[roles.Replica], l)
	st := scenario(t, l, ids)
	gatewayRun(t, l, ids)
	alertsRun(t, l, ids, r)
	_, ok := st.Budget(events.BudgetRef{Scope: "org:acme", Period: "lifetime"})
	require.True(t, ok)
	// The whole run met no permission violation on any connection.
	for _, n := range roles.Names {
		select {
		case err := <-ids[n].errs:
			t.Fatalf("%s: unexpected asynchronous error in a permitted run: %v", n, err)
		default:
		}
	}

	ctx := context.Background()
	// A tenant's limits are the deployment administration's: admin puts
	// them, no other role reaches the endpoint.
	tl, err := newClient(t, ids[roles.Admin], l).PutTenantLimits(ctx, events.TenantLimitsPutRequest{Tenant: "acme", MaxOpen: new(int64(100))})
	require.NoError(t, err, "admin puts a tenant's limits")
	require.True(t, tl.Created)
	for _, n := range []string{roles.Service, roles.Finance, roles.Feed, roles.Gateway} {
		refused(t, ids[n], l.Endpoint(streams.EndpointTenantLimitsPut))
	}
	rjs, err := jetstream.New(ids[roles.Replica].nc)
	require.NoError(t, err)
	stream, err := rjs.Stream(ctx, l.StreamName())
	require.NoError(t, err)
	before := stream.CachedInfo().State

	// A calling service may not define budgets (the client's two
	// attempts of a second each bound the wait; the refusal ends it).
	svc := newClient(t, ids[roles.Service], l)
	ids[roles.Service].refusedRequest(t, "budget.put", "Publish", l.Endpoint(streams.EndpointBudgetPut), waitBound, func(ctx context.Context) error {
		_, err := svc.PutBudget(ctx, events.BudgetPutRequest{Scope: "org:acme", Period: "lifetime", Limit: "1000000", Unit: "USD"})
		return err
	})
	refused(t, ids[roles.Service], l.Endpoint(streams.EndpointBudgetPut))
	refused(t, ids[roles.Finance], l.Endpoint(streams.EndpointBudgetPut))
	// Nor retire one: a retirement cannot be undone.
	refused(t, ids[roles.Service], l.Endpoint(streams.EndpointBudgetRetire))
	refused(t, ids[roles.Finance], l.Endpoint(streams.EndpointBudgetRetire))

	// `nats kv put spendgate budget.org.acme.lifetime ...` and friends,
	// by everyone but the replica.
	for _, n := range []string{roles.Service, roles.Admin, roles.Finance, roles.Gateway} {
		id := ids[n]
		kv := l.Subject(streams.BudgetKey(events.BudgetRef{Scope: "org:acme", Period: "lifetime"}))
		refused(t, id, kv)
		refused(t, id, l.Subject("budget.x"))
		refused(t, id, l.Subject("lane.0"))
		js, err := jetstream.New(id.nc)
		require.NoError(t, err)
		id.refusedRequest(t, n, "Publish", kv, 300*time.Millisecond, func(ctx context.Context) error {
			_, err := js.Publish(ctx, kv, []byte(`{}`))
			return err
		})
		for _, api := range []string{"STREAM.DELETE.", "STREAM.PURGE.", "STREAM.UPDATE.", "STREAM.CREATE."} {
			refused(t, id, "$JS.API."+api+l.StreamName())
		}
	}
	// The feed is the replica's to append to: no other role writes it,
	// and no role deletes or purges it.
	for _, n := range []string{roles.Service, roles.Admin, roles.Finance, roles.Feed} {
		refused(t, ids[n], l.FeedPrefix()+"budget.defined.v1.org.acme")
		for _, api := range []string{"STREAM.DELETE.", "STREAM.PURGE.", "STREAM.UPDATE.", "STREAM.CREATE."} {
			refused(t, ids[n], "$JS.API."+api+l.FeedStreamName())
		}
	}
	refused(t, ids[roles.Replica], "$JS.API.STREAM.PURGE."+l.FeedStreamName())
	refused(t, ids[roles.Replica], "$JS.API.STREAM.DELETE."+l.FeedStreamName())
	// A gateway's host may resolve keys, never mint, rotate, disable or
	// list them, nor discover the replicas.
	for _, ep := range []string{streams.EndpointAPIKeyCreate, streams.EndpointAPIKeyRotate, streams.EndpointAPIKeyDisable, streams.EndpointAPIKeyList} {
		refused(t, ids[roles.Gateway], l.Endpoint(ep))
		refused(t, ids[roles.Gateway], l.TenantEndpoint("acme", ep))
	}
	refused(t, ids[roles.Gateway], "$SRV.PING")
	// Nor change a budget or a price with its login alone: only on the
	// keyed subjects, for a key the replica checks (gatewayRun puts one).
	for _, ep := range []string{streams.EndpointBudgetPut, streams.EndpointPricingPut, streams.EndpointBudgetRetire} {
		refused(t, ids[roles.Gateway], l.Endpoint(ep))
		refused(t, ids[roles.Gateway], l.TenantEndpoint("acme", ep))
	}
	refused(t, ids[roles.Feed], l.Subject("lane.0"))
	refused(t, ids[roles.Feed], l.Endpoint(streams.EndpointAdmit))

	// Even the replica cannot delete or purge its ledger.
	ids[roles.Replica].refusedRequest(t, "delete the ledger", "Publish", "$JS.API.STREAM.DELETE.", 300*time.Millisecond, func(ctx context.Context) error {
		return rjs.DeleteStream(ctx, l.StreamName())
	})
	refused(t, ids[roles.Replica], "$JS.API.STREAM.PURGE."+l.StreamName())

	// Nothing changed: same last sequence, and the audit still passes.
	stream, err = rjs.Stream(ctx, l.StreamName())
	require.NoError(t, err)
	require.Equal(t, before.LastSeq, stream.CachedInfo().State.LastSeq)
	fjs, err := jetstream.New(ids[roles.Finance].nc)
	require.NoError(t, err)
	rep, err := projector.Check(ctx, fjs, l)
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.String())

	// A client that ignores its role's inbox prefix would get no replies
	// (the server refuses its reply subscription): Connect says so at once.
	np := natsconn.Options{URL: s.ClientURL(), User: roles.Service, Password: password(roles.Service)}
	_, err = np.Connect("roles-test-no-prefix")
	require.ErrorIs(t, err, natsconn.ErrInboxDenied)
	require.ErrorContains(t, err, `Subscription to "_INBOX.`)
}

// traceLog records the server's protocol trace lines.
type traceLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *traceLog) Noticef(string, ...any) {}
func (l *traceLog) Warnf(string, ...any)   {}
func (l *traceLog) Fatalf(string, ...any)  {}
func (l *traceLog) Errorf(string, ...any)  {}
func (l *traceLog) Debugf(string, ...any)  {}
func (l *traceLog) Tracef(format string, v ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
	l.mu.Unlock()
}

// traceRE picks the user, the operation and the subject of a client's
// PUB, HPUB or SUB in a trace line.
var traceRE = regexp.MustCompile(`"\$G/user:([a-z]+)" - <<- \[(H?PUB|SUB) (\S+)`)

// matches reports whether subject matches the NATS filter f.
func matches(f, subject string) bool {
	ft, st := strings.Split(f, "."), strings.Split(subject, ".")
	for i, tok := range ft {
		if tok == ">" {
			return len(st) > i
		}
		if i >= len(st) || (tok != "*" && tok != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}

func permits(r roles.Rules, subject string) bool {
	allowed := len(r.Allow) == 0 || slices.ContainsFunc(r.Allow, func(f string) bool { return matches(f, subject) })
	return allowed && !slices.ContainsFunc(r.Deny, func(f string) bool { return matches(f, subject) })
}

// TestRoles_CoverARealRun records, from the server's protocol trace, every
// subject each identity publishes or subscribes to in the scenario run on a
// permissive server, and requires the role layout to permit each one (a
// publish into another role's inbox counts as a reply when the role has
// allow_responses). It is how the layout was derived, and it fails if
// spendgate starts using a subject the layout does not grant.
func TestRoles_CoverARealRun(t *testing.T) {
	t.Parallel()
	l := streams.Default()
	var users []roles.User
	for _, n := range roles.Names {
		users = append(users, roles.User{Name: n, Role: observerRole.Name, Password: password(n)})
	}
	conf, err := roles.Authorization([]roles.Role{observerRole}, users)
	require.NoError(t, err)
	tl := &traceLog{}
	s := startConf(t, conf, true, tl)
	ids := map[string]*ident{}
	for _, n := range roles.Names {
		ids[n] = dialRole(t, s, l, n)
	}
	startReplica(t, ids[roles.Replica], l)
	scenario(t, l, ids)
	gatewayRun(t, l, ids)

	tl.mu.Lock()
	lines := slices.Clone(tl.lines)
	tl.mu.Unlock()
	seen := map[string]bool{}
	var problems []string
	for _, line := range lines {
		m := traceRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		role, op, subject := m[1], m[2], m[3]
		r, err := roles.ByName(l, role)
		require.NoError(t, err)
		var ok bool
		if op == "SUB" {
			ok = permits(r.Subscribe, subject)
		} else {
			ok = permits(r.Publish, subject) || (r.AllowResponses && strings.HasPrefix(subject, "_INBOX"))
		}
		key := role + " " + op + " " + subject
		if !ok && !seen[key] {
			problems = append(problems, key)
		}
		seen[key] = true
	}
	require.NotEmpty(t, seen, "the trace recorded nothing: %q", lines[:min(5, len(lines))])
	sort.Strings(problems)
	require.Empty(t, problems, "subjects used in a real run that the layout refuses:\n%s", strings.Join(problems, "\n"))
}

// gatewayRun is what spendgate gateway does under the gateway role, with
// a fake provider behind it: a chat call, the model list and the key's
// budgets of a key with scopes, and HTTP API calls of a key with service access (a budget read,
// an admit and its settle) and of one with admin access (a budget put).
// The admin defines the price, the budget and the keys. Every call must
// succeed: a subject the role does not grant would time it out.
func gatewayRun(t *testing.T, l streams.Layout, ids map[string]*ident) {
	t.Helper()
	ctx := context.Background()
	admin := newClient(t, ids[roles.Admin], l)
	_, err := admin.PutPrice(ctx, events.PricingPutRequest{Model: "gpt-x", Input: "1", Output: "2"})
	require.NoError(t, err)
	_, err = admin.PutBudget(ctx, events.BudgetPutRequest{Scope: "team:gw", Period: "month", Limit: "10", Unit: "USD"})
	require.NoError(t, err)
	key := func(access string, scopes ...string) string {
		id, secret, err := events.NewAPIKey()
		require.NoError(t, err)
		data, err := json.Marshal(events.APIKeyCreateRequest{ID: id, Hash: events.HashAPIKey(secret), Scopes: scopes, Access: access})
		require.NoError(t, err)
		msg, err := ids[roles.Admin].nc.Request(l.Endpoint(streams.EndpointAPIKeyCreate), data, waitBound)
		require.NoError(t, err)
		require.NotContains(t, string(msg.Data), `"error"`, string(msg.Data))
		return secret
	}
	proxyKey, serviceKey, adminKey := key("", "team:gw"), key(events.AccessService), key(events.AccessAdmin)

	const upstreamKey = "sk-fake"
	up := httptest.NewServer(fakellm.New(upstreamKey))
	t.Cleanup(up.Close)
	nc := ids[roles.Gateway].nc
	cs, err := gateway.NewClientSet(nc, l.Prefix(), client.WithTimeout(time.Second), client.WithRetries(1))
	require.NoError(t, err)
	root, err := cs.For("")
	require.NoError(t, err)
	keys := gateway.NewKeys(root, 0)
	g, err := gateway.New(cs, keys, gateway.Config{Upstreams: []gateway.Upstream{{Kind: gateway.KindOpenAI, BaseURL: up.URL + "/v1", Key: upstreamKey}}})
	require.NoError(t, err)
	api, err := httpapi.New(nc, l.Prefix(), keys, httpapi.WithTimeout(waitBound))
	require.NoError(t, err)
	mux := http.NewServeMux()
	g.Register(mux)
	api.Register(mux)
	gs := httptest.NewServer(mux)
	t.Cleanup(gs.Close)

	call := func(method, path, secret, body string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, gs.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		resp, err := gs.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s %s: %s", method, path, out)
		return string(out)
	}
	call(http.MethodPost, "/v1/chat/completions", proxyKey, `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":10}`)
	require.Contains(t, call(http.MethodGet, "/v1/models", proxyKey, ""), `"gpt-x"`)
	require.Contains(t, call(http.MethodGet, "/v1/key", proxyKey, ""), `"scope":"team:gw"`)
	require.Contains(t, call(http.MethodPost, "/spendgate/budget.get", serviceKey, `{"scope":"team:gw","period":"month"}`), `"spent":"0.`)
	var adm events.AdmitReply
	require.NoError(t, json.Unmarshal([]byte(call(http.MethodPost, "/spendgate/admit", serviceKey, `{"request_id":"api-1","scopes":["team:gw"],"amount":"1"}`)), &adm))
	require.True(t, adm.Admitted)
	call(http.MethodPost, "/spendgate/settle", serviceKey, `{"reservation_id":"`+adm.ReservationID+`","actual":"0.5"}`)
	call(http.MethodPost, "/spendgate/budget.put", adminKey, `{"scope":"team:gw","period":"month","limit":"20","unit":"USD"}`)
	v, err := admin.GetBudget(ctx, events.BudgetGetRequest{Scope: "team:gw", Period: "month"})
	require.NoError(t, err)
	require.Equal(t, "20", v.Limit)
	require.EqualValues(t, 0, v.Open, "the chat call and the admit were settled")
}

// alertsRun runs the webhook sink under the alerts role, once for every
// alert and once for a tenant's (each on a durable consumer of its own),
// and has the replica publish a blocking alert of the deployment and one
// of acme: each reaches its webhook, so the role holds what the sink needs
// (the alert stream's info, its consumer's create with either filter,
// pulls and acks). How we know it can fail: without its consumer create
// the sink's Run stops at once (a permission violation, then a timeout).
func alertsRun(t *testing.T, l streams.Layout, ids map[string]*ident, r *replica.Replica) {
	t.Helper()
	js, err := jetstream.New(ids[roles.Alerts].nc)
	require.NoError(t, err)
	type got struct {
		mu     sync.Mutex
		scopes []string
	}
	run := func(tenant string) *got {
		g := &got{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			var body struct {
				Alert events.Alert `json:"alert"`
			}
			_ = json.NewDecoder(req.Body).Decode(&body)
			g.mu.Lock()
			g.scopes = append(g.scopes, string(body.Alert.Balance.Scope))
			g.mu.Unlock()
		}))
		t.Cleanup(srv.Close)
		s, err := alerting.NewSink(js, l, alerting.SinkConfig{URL: srv.URL, Tenant: tenant})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		var stopped error
		t.Cleanup(func() {
			cancel()
			if stopped == nil {
				<-done
			}
		})
		durable := alerting.DefaultDurable
		if tenant != "" {
			durable += "-" + tenant
		}
		require.Eventually(t, func() bool {
			select {
			case stopped = <-done:
				return true
			default:
			}
			st, err := js.Stream(ctx, l.AlertStreamName())
			if err != nil {
				return false
			}
			_, err = st.Consumer(ctx, durable)
			return err == nil
		}, 30*time.Second, 10*time.Millisecond, "the sink's consumer %s", durable)
		require.NoError(t, stopped, "the sink of %q stopped", tenant)
		return g
	}
	all, acme := run(""), run("acme")
	for _, scope := range []events.Scope{"org:own", events.TenantScope("acme", "org:a")} {
		bal := events.BalanceRef{Scope: scope, Period: events.PeriodDay, Instance: "2026-12-02"}
		r.Alerts.Blocked(events.BlockingAlert(bal, "USD", events.MustMoney("5"), events.MustMoney("4.9"), "1", "r1", 0, time.Now()))
	}
	scopes := func(g *got) []string {
		g.mu.Lock()
		defer g.mu.Unlock()
		return slices.Sorted(slices.Values(g.scopes))
	}
	require.Eventually(t, func() bool { return len(scopes(all)) == 2 && len(scopes(acme)) == 1 }, 30*time.Second, 10*time.Millisecond,
		"each alert reaches its webhooks")
	require.Equal(t, []string{"acme/org:a", "org:own"}, scopes(all))
	require.Equal(t, []string{"acme/org:a"}, scopes(acme))
	select {
	case err := <-ids[roles.Alerts].errs:
		t.Fatalf("alerts: a permission violation in a permitted run: %v", err)
	default:
	}
}
