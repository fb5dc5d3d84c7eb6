package projector

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/streams"
)

// A read up to a sequence that its consumer never delivers (as from a copy
// that cannot be read) fails after readStall, saying where it stopped,
// instead of waiting for the caller's deadline. It fails if the watch is
// removed (the read then waits for ctx, a minute here).
func TestRead_Stall(t *testing.T) {
	defer func(old time.Duration) { readStall = old }(readStall)
	readStall = 300 * time.Millisecond
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	require.NoError(t, err)
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	require.True(t, srv.ReadyForConnections(10*time.Second))
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	layout := streams.Default()
	_, err = streams.Ensure(ctx, js, layout)
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err := js.Publish(ctx, layout.Subject("budget.x"), []byte("{}"))
		require.NoError(t, err)
	}
	p := New(js, layout)
	s, _, err := p.stream(ctx)
	require.NoError(t, err)
	start := time.Now()
	// Messages 4..10 do not exist: the consumer delivers nothing.
	err = p.read(ctx, s, 4, 10, func(message) error { return nil })
	require.ErrorContains(t, err, "projector: read KV_spendgate: no message for 300ms after seq 3 of 10")
	require.Less(t, time.Since(start), 10*time.Second)
	// What exists is read as before.
	n := 0
	require.NoError(t, p.read(ctx, s, 1, 3, func(message) error { n++; return nil }))
	require.Equal(t, 3, n)
}
