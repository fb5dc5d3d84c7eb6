package ledger_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/testenv"
)

// writerConn returns the server's view of the connection named name, if
// it is open.
func writerConn(t *testing.T, env *testenv.Env, name string) (*server.ConnInfo, bool) {
	t.Helper()
	cz, err := env.Server.Connz(&server.ConnzOptions{})
	require.NoError(t, err)
	for _, c := range cz.Conns {
		if c.Name == name {
			return c, true
		}
	}
	return nil, false
}

// The ledger's writes travel on a connection of their own while Run runs
// (named after the replica's, "(ledger writes)"), and that connection is
// closed when Run returns. Without the dedicated writer (WithWriteConn
// false) there is no such connection.
func TestWriteConn_WritesOnTheirOwnConnection(t *testing.T) {
	for _, own := range []bool{true, false} {
		t.Run(map[bool]string{true: "own", false: "shared"}[own], func(t *testing.T) {
			env := testenv.New(t)
			nc, l, cancel, done := runBudgeted(t, env, ledger.WithWriteConn(own))
			for i := 0; i < 3; i++ {
				tx := &openTx{id: "w" + string(rune('a'+i)), amount: events.MustMoney("1")}
				require.NoError(t, l.Submit(context.Background(), tx))
				require.False(t, tx.denied)
			}
			name := nc.Opts.Name + " (ledger writes)"
			_, found := writerConn(t, env, name)
			require.Equal(t, own, found, "connection %q", name)
			if own {
				// The budget's revision and three lane revisions. The
				// server adds a read's messages to the connection's count
				// after it has handled them, acks included: wait for it.
				require.Eventually(t, func() bool {
					c, ok := writerConn(t, env, name)
					return ok && c.InMsgs >= 4
				}, watchdog, 10*time.Millisecond, "the writer connection carried fewer than 4 messages")
			}
			cancel()
			select {
			case <-done:
			case <-time.After(watchdog):
				t.Fatal("Run did not return")
			}
			require.Eventually(t, func() bool { _, open := writerConn(t, env, name); return !open },
				watchdog, 10*time.Millisecond, "the writer connection outlived Run")
			check(t, env)
		})
	}
}

// Run's end closes the writer connection only once the write in flight on
// it has its answer: the write lands and its caller is told so. (Closed at
// once, the held write would go out on a closed connection and its caller
// would get ledger_unavailable for a write that never left.)
func TestWriteConn_RunWaitsForTheWriteInFlight(t *testing.T) {
	env := testenv.New(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	lane := env.Layout.Subject(env.Layout.LaneKey(bal))
	hook := ledger.PublishHookForTesting(func(ctx context.Context, m *nats.Msg, send func(context.Context, *nats.Msg) (*nats.Msg, error)) (*nats.Msg, error) {
		if m.Subject == lane {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
		return send(ctx, m)
	})
	_, l, cancel, done := runBudgeted(t, env, hook)
	tx := &openTx{id: "held", amount: events.MustMoney("1")}
	submitted := submitAsync(context.Background(), l, tx)
	select {
	case <-entered:
	case <-time.After(watchdog):
		t.Fatal("the write never started")
	}
	cancel()
	// Run stops deciding at once (Sync, which reads no lane, says so),
	// but returns only after the held write. A Sync already waiting for
	// the follower when it stopped answers then too: before, it waited
	// out its SyncTimeout (10 s, in about half the runs).
	var slowest time.Duration
	require.Eventually(t, func() bool {
		start := time.Now()
		err := l.Sync(context.Background())
		slowest = max(slowest, time.Since(start))
		return err != nil
	}, watchdog, time.Millisecond)
	require.Less(t, slowest, ledger.SyncTimeout/2, "a Sync waited out its timeout after the follower stopped")
	select {
	case <-done:
		t.Fatal("Run returned while a write was in flight on its writer connection")
	default:
	}
	close(release)
	require.NoError(t, await(t, submitted))
	select {
	case <-done:
	case <-time.After(watchdog):
		t.Fatal("Run did not return")
	}
	check(t, env)
}

// runBudgeted runs a ledger with opts on a connection of its own until the
// test ends or cancel is called (Run's answer then arrives on done), and
// defines bal's budget with a limit of 10.
func runBudgeted(t *testing.T, env *testenv.Env, opts ...ledger.Option) (*nats.Conn, *ledger.Ledger, context.CancelFunc, <-chan error) {
	t.Helper()
	nc := env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	l, err := ledger.New(context.Background(), nc, js, env.Layout, opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(cancel)
	select {
	case <-l.Ready():
	case <-time.After(testenv.SetupTimeout):
		t.Fatal("ledger not ready")
	}
	_, err = l.PutBudget(context.Background(), bal.Budget(), events.MustMoney("10"), "USD", t0)
	require.NoError(t, err)
	return nc, l, cancel, done
}
