package roles_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/natsconn"
	"github.com/spendgate/spendgate/internal/roles"
	"github.com/spendgate/spendgate/streams"
)

// waitBound bounds every wait on a condition in these tests.
const waitBound = 5 * time.Second

// observerRole may do anything: the matrix test's witness.
var observerRole = roles.Role{
	Name:        "observer",
	Description: "test witness",
	Publish:     roles.Rules{Allow: []string{">"}},
	Subscribe:   roles.Rules{Allow: []string{">"}},
}

// startConf starts a nats-server from a config body on 127.0.0.1 and a
// random port (with JetStream in a temp dir if jetstream is set) and stops
// it when t ends. A non-nil trace logger receives the protocol trace.
func startConf(t *testing.T, body string, jetstream bool, trace server.Logger) *server.Server {
	t.Helper()
	dir := t.TempDir()
	conf := "listen: \"127.0.0.1:-1\"\n"
	if jetstream {
		conf += fmt.Sprintf("jetstream { store_dir: %q }\n", filepath.Join(dir, "js"))
	}
	conf += body
	path := filepath.Join(dir, "server.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	opts, err := server.ProcessConfigFile(path)
	require.NoError(t, err, "config:\n%s", conf)
	opts.NoLog, opts.NoSigs = trace == nil, true
	opts.Trace = trace != nil
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	if trace != nil {
		s.SetLogger(trace, false, true)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	require.True(t, s.ReadyForConnections(waitBound), "server not ready")
	if jetstream {
		deadline := time.Now().Add(waitBound)
		for !s.JetStreamEnabled() {
			require.True(t, time.Now().Before(deadline), "jetstream not enabled")
			time.Sleep(10 * time.Millisecond)
		}
	}
	return s
}

// ident is one connected identity with its asynchronous errors.
type ident struct {
	role string
	nc   *nats.Conn
	errs chan error
}

// password is the test password of a user.
func password(user string) string { return "pw-" + user + "-secret" }

// exportPasswords puts each user's password in the environment variable
// the rendered configuration reads it from (roles.PasswordEnv), as an
// operator exports it before starting nats-server; the in-process server
// reads it when it loads the file. os.Setenv, not t.Setenv, so that the
// tests can run in parallel: a user's password is the same in every test
// (password), so tests setting it at once never disagree, and it stays set.
func exportPasswords(t *testing.T, users ...string) {
	t.Helper()
	for _, u := range users {
		require.NoError(t, os.Setenv(roles.PasswordEnv(u), password(u)))
	}
}

// dial connects as user (a role's default user) with the role's inbox
// prefix, collecting permission violations.
func dial(t *testing.T, s *server.Server, l streams.Layout, user string, inbox string) *ident {
	t.Helper()
	return dialWith(t, user, natsconn.Options{URL: s.ClientURL(), User: user, Password: password(user), InboxPrefix: inbox})
}

// dialWith connects with o as an identity named name, collecting permission
// violations.
func dialWith(t *testing.T, name string, o natsconn.Options) *ident {
	t.Helper()
	id := &ident{role: name, errs: make(chan error, 256)}
	nc, err := o.Connect("roles-test-"+name, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case id.errs <- err:
		default:
		}
	}))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	id.nc = nc
	return id
}

// dialRole connects as the default user of role.
func dialRole(t *testing.T, s *server.Server, l streams.Layout, role string) *ident {
	t.Helper()
	r, err := roles.ByName(l, role)
	require.NoError(t, err)
	return dial(t, s, l, role, r.InboxPrefix)
}

// violated reports whether err is the permission violation of op ("Publish"
// or "Subscription") on subject.
func violated(err error, op, subject string) bool {
	return err != nil && strings.Contains(err.Error(), fmt.Sprintf("Permissions Violation for %s to %q", op, subject))
}

// drainErrs empties id's error channel.
func (id *ident) drainErrs() {
	for {
		select {
		case <-id.errs:
		default:
			return
		}
	}
}

// outcome waits until msgs delivers a message (allowed) or id reports the
// violation of op on subject (denied), whichever comes first: the wait
// ends on the event, never on a poll interval. With msgs nil it waits for
// the violation only.
func (id *ident) outcome(t *testing.T, msgs <-chan *nats.Msg, op, subject string) bool {
	t.Helper()
	bound := time.NewTimer(waitBound)
	defer bound.Stop()
	for {
		select {
		case <-msgs: // a nil channel never delivers
			return true
		case err := <-id.errs:
			if violated(err, op, subject) {
				return false
			}
		case <-bound.C:
			t.Fatalf("%s: %s %s: neither delivered nor refused within %s", id.role, op, subject, waitBound)
			return false
		}
	}
}

// refusedRequest requires request, which sends one request as id under
// ctx, to fail within bound. The server drops a request it refuses, or
// the subscription that would receive the reply, and tells id with a
// permission violation of op ("Publish" or "Subscription") on a subject
// starting with prefix: no reply can come after that, so the wait ends
// there instead of running out the bound (request then fails as
// cancelled).
func (id *ident) refusedRequest(t *testing.T, what, op, prefix string, bound time.Duration, request func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	id.drainErrs()
	done := make(chan error, 1)
	go func() { done <- request(ctx) }()
	for {
		select {
		case err := <-done:
			require.Error(t, err, what)
			return
		case err := <-id.errs:
			if err != nil && strings.Contains(err.Error(), "Permissions Violation for "+op+` to "`+prefix) {
				cancel()
			}
		}
	}
}

// probe subscribes to subject on nc (in queue group "q" if queue is set)
// with a small channel of its own: the outcome waits on it, and a sync
// subscription's default 64k-message channel is not allocated per probe.
func probe(t *testing.T, nc *nats.Conn, subject string, queue bool) (*nats.Subscription, <-chan *nats.Msg) {
	t.Helper()
	ch := make(chan *nats.Msg, 8)
	var sub *nats.Subscription
	var err error
	if queue {
		sub, err = nc.ChanQueueSubscribe(subject, "q", ch)
	} else {
		sub, err = nc.ChanSubscribe(subject, ch)
	}
	require.NoError(t, err)
	return sub, ch
}

// canPublish publishes to subject as id; the observer's subscription tells
// delivery, the violation tells refusal.
func canPublish(t *testing.T, obs, id *ident, subject string) bool {
	t.Helper()
	id.drainErrs()
	sub, msgs := probe(t, obs.nc, subject, false)
	defer sub.Unsubscribe()
	require.NoError(t, obs.nc.Flush())
	require.NoError(t, id.nc.Publish(subject, []byte("probe")))
	require.NoError(t, id.nc.Flush())
	return id.outcome(t, msgs, "Publish", subject)
}

// canSubscribe subscribes to filter as id and has the observer publish to
// probe (a subject filter matches).
func canSubscribe(t *testing.T, obs, id *ident, filter, subject string, queue bool) bool {
	t.Helper()
	id.drainErrs()
	sub, msgs := probe(t, id.nc, filter, queue)
	defer sub.Unsubscribe()
	require.NoError(t, id.nc.Flush())
	require.NoError(t, obs.nc.Publish(subject, []byte("probe")))
	require.NoError(t, obs.nc.Flush())
	return id.outcome(t, msgs, "Subscription", filter)
}
