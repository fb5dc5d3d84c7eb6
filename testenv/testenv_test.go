package testenv_test

import (
	"context"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// failoverTimeout bounds how long the cluster may take to elect a new
// stream leader after the old one stops.
const failoverTimeout = 20 * time.Second

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestNew_LedgerStream(t *testing.T) {
	e := testenv.New(t)
	ctx := ctxT(t)

	require.Equal(t, streams.Default(), e.Layout)
	require.DirExists(t, e.StoreDir)
	require.Equal(t, nats.CONNECTED, e.Conn.Status())

	s, err := e.JS.Stream(ctx, e.Layout.StreamName())
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.True(t, info.Config.AllowAtomicPublish)
	require.Equal(t, streams.KeepRevisions, info.Config.MaxMsgsPerSubject)
	require.Equal(t, 1, info.Config.Replicas)

	kv, err := e.JS.KeyValue(ctx, e.Layout.Bucket())
	require.NoError(t, err)
	rev, err := kv.Put(ctx, "k", []byte("v"))
	require.NoError(t, err)
	require.Equal(t, uint64(1), rev)
}

func TestNew_RandomPort(t *testing.T) {
	e := testenv.New(t)
	u, err := url.Parse(e.URL())
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", u.Hostname())
	require.NotEqual(t, "4222", u.Port())
	require.NotEqual(t, "0", u.Port())
	require.Equal(t, e.URL(), e.Server.ClientURL())
}

func TestNew_Options(t *testing.T) {
	layout, err := streams.New(streams.Config{Bucket: "other", Prefix: "other."})
	require.NoError(t, err)
	e := testenv.New(t, testenv.WithLayout(layout), testenv.WithSyncAlways())
	ctx := ctxT(t)

	_, err = e.JS.Stream(ctx, "KV_other")
	require.NoError(t, err)
	_, err = e.JS.Stream(ctx, streams.Default().StreamName())
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
}

func TestEnv_Connect(t *testing.T) {
	e := testenv.New(t)
	nc := e.Connect(t)
	require.NotSame(t, e.Conn, nc)

	sub, err := nc.SubscribeSync("testenv.ping")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	require.NoError(t, e.Conn.Publish("testenv.ping", []byte("hi")))
	msg, err := sub.NextMsg(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "hi", string(msg.Data))
}

func TestEnv_Restart(t *testing.T) {
	e := testenv.New(t)
	ctx := ctxT(t)
	url, dir := e.URL(), e.StoreDir
	old := e.Server

	kv, err := e.JS.KeyValue(ctx, e.Layout.Bucket())
	require.NoError(t, err)
	rev, err := kv.Put(ctx, "budget.k", []byte("42"))
	require.NoError(t, err)

	e.Restart(t)

	require.NotSame(t, old, e.Server)
	require.False(t, old.Running())
	require.Equal(t, url, e.URL())
	require.Equal(t, dir, e.StoreDir)
	require.Equal(t, nats.CONNECTED, e.Conn.Status())

	got, err := kv.Get(ctx, "budget.k")
	require.NoError(t, err)
	require.Equal(t, "42", string(got.Value()))
	require.Equal(t, rev, got.Revision())

	// Writes go on after the restart, with the next revision.
	rev2, err := kv.Update(ctx, "budget.k", []byte("43"), rev)
	require.NoError(t, err)
	require.Greater(t, rev2, rev)
}

func TestCluster_FailoverOnStreamLeaderStop(t *testing.T) {
	c := testenv.NewCluster(t, 3)
	ctx := ctxT(t)
	require.Len(t, c.Servers, 3)
	require.Equal(t, 3, c.Layout.Config().Replicas)

	s, err := c.JS.Stream(ctx, c.Layout.StreamName())
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, info.Config.Replicas)
	require.NotNil(t, info.Cluster)
	require.NotEmpty(t, info.Cluster.Leader)
	require.Len(t, info.Cluster.Replicas, 2)

	kv, err := c.JS.KeyValue(ctx, c.Layout.Bucket())
	require.NoError(t, err)
	_, err = kv.Put(ctx, "budget.k", []byte("1"))
	require.NoError(t, err)

	leader := -1
	testenv.WaitFor(t, failoverTimeout, "a ledger stream leader", func() bool {
		leader = c.Leader()
		return leader >= 0
	})
	require.Equal(t, info.Cluster.Leader, c.Servers[leader].Name())

	c.StopServer(leader)
	require.False(t, c.Servers[leader].Running())

	testenv.WaitFor(t, failoverTimeout, "a put after the stream leader stopped", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := kv.Put(ctx, "budget.k", []byte("2"))
		return err == nil
	})
	newLeader := -1
	testenv.WaitFor(t, failoverTimeout, "a new ledger stream leader", func() bool {
		newLeader = c.Leader()
		return newLeader >= 0
	})
	require.NotEqual(t, leader, newLeader)

	c.RestartServer(t, leader)
	require.True(t, c.Servers[leader].Running())
	got, err := kv.Get(ctx, "budget.k")
	require.NoError(t, err)
	require.Equal(t, "2", string(got.Value()))
}

func TestStartServer_RequiresStoreDir(t *testing.T) {
	_, err := testenv.StartServer(testenv.ServerConfig{NoLog: true})
	require.Error(t, err)
}

func TestStartServer_RestartOnSamePortAndStore(t *testing.T) {
	cfg := testenv.ServerConfig{StoreDir: t.TempDir(), ServerName: "n1", NoLog: true}
	s, err := testenv.StartServer(cfg)
	require.NoError(t, err)
	u, err := url.Parse(s.ClientURL())
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", u.Hostname())
	s.Shutdown()
	s.WaitForShutdown()

	entries, err := os.ReadDir(cfg.StoreDir)
	require.NoError(t, err)
	require.NotEmpty(t, entries, "jetstream wrote into StoreDir")

	cfg.Port, err = strconv.Atoi(u.Port())
	require.NoError(t, err)
	s, err = testenv.StartServer(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	require.Equal(t, u.String(), s.ClientURL())
	require.True(t, s.NATS().JetStreamEnabled())
}
