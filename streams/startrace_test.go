package streams_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/soak"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestEnsure_TwoNodesAtOnce: two clients on different nodes of a 3-node
// cluster ensure the ledger, alert, denial and feed streams of a fresh
// layout at the same moment, as two replicas starting together do
// (replica.Start; the feed with serve --feed). Both must succeed, and
// neither may wait out an attempt's StartAttemptTimeout: every attempt is
// answered.
//
// How it can fail: a request of one client that met the other's create
// still in flight on the meta leader went unanswered (nats-server 2.15.2):
// CreateOrUpdateStream's update (alerts, denials, feed; and then the
// other's create went unanswered too), and Ensure's read of the ledger
// stream before it created it. Each waited out the 5 s attempt and the
// retry found the stream made (the feed's own loop did not retry a
// timeout: it waited out ctx and failed). TestCluster_TwoReplicasStartTogether
// (internal/service) spent 5 to 10 s of its 14-24 s there. Once, in
// round 31 of 40 of the soak, a feed create was answered "error creating
// store for stream" (10049), the server's reason only in its log (which a
// failing cluster test now prints); the ensures retry that answer too.
func TestEnsure_TwoNodesAtOnce(t *testing.T) {
	t.Parallel()
	c := testenv.NewCluster(t, 3)
	jss := make([]jetstream.JetStream, 2)
	for i := range jss {
		nc, err := nats.Connect(c.Servers[i].ClientURL())
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		jss[i], err = jetstream.New(nc)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ensure := map[string]func(jetstream.JetStream, streams.Layout) (jetstream.Stream, error){
		"ledger": func(js jetstream.JetStream, l streams.Layout) (jetstream.Stream, error) {
			return streams.Ensure(ctx, js, l)
		},
		"alerts": func(js jetstream.JetStream, l streams.Layout) (jetstream.Stream, error) {
			return streams.EnsureAlerts(ctx, js, l)
		},
		"denials": func(js jetstream.JetStream, l streams.Layout) (jetstream.Stream, error) {
			return streams.EnsureDenials(ctx, js, l, 0, 0)
		},
		"feed": func(js jetstream.JetStream, l streams.Layout) (jetstream.Stream, error) {
			return streams.EnsureFeed(ctx, js, l)
		},
	}
	// Both clients run f at the same moment; each must succeed within
	// one attempt's timeout.
	together := func(what string, f func(jetstream.JetStream) (jetstream.Stream, error)) {
		t.Helper()
		took := make([]time.Duration, len(jss))
		errs := make([]error, len(jss))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, js := range jss {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				t0 := time.Now()
				_, errs[i] = f(js)
				took[i] = time.Since(t0)
			}()
		}
		close(start)
		wg.Wait()
		for i := range jss {
			require.NoError(t, errs[i], "%s: client %d", what, i)
			require.Less(t, took[i], streams.StartAttemptTimeout, "%s: client %d: an attempt went unanswered and was waited out", what, i)
		}
	}
	// Measured under -race before the fix: 6 of 32 pairs of alert or
	// denial ensures collided, and 2 of 24 pairs of ledger ensures; the
	// feed's failed in round 2 of 40 (8 rounds alone passed once). So
	// 8 rounds (16 side-stream pairs, 8 ledger pairs) catch the side
	// streams' update-first in 97 runs of 100, a ledger read-first alone
	// in about half: the soak step runs 40 rounds (40 ledger pairs catch it
	// in 96 of 100), and TestCluster_TwoReplicasStartTogether
	// (internal/service) meets it too.
	rounds := 8
	if soak.Long() {
		rounds = 40
	}
	// An anchor stream stays for the whole test. Deleting an account's
	// last stream removes its streams directory on each node from a
	// goroutine (nats-server 2.15.2, stream.go and jetstream_cluster.go:
	// "no op if not empty"), and a create that lands meanwhile fails
	// "could not create storage directory" on that node and goes
	// unanswered for the whole attempt: once in CI, round 3's ledger
	// ensure waited 5.2 s. Replicas never delete their streams, so that is
	// the test's own race, not the one it looks for.
	const anchor = "ANCHOR"
	_, err := jss[0].CreateStream(ctx, jetstream.StreamConfig{Name: anchor, Subjects: []string{"anchor"}, Replicas: 3})
	require.NoError(t, err)
	var l streams.Layout
	for round := 0; round < rounds; round++ {
		var err error
		l, err = streams.New(streams.Config{Bucket: fmt.Sprintf("side%d", round), Prefix: fmt.Sprintf("side%d.", round), Replicas: 3})
		require.NoError(t, err)
		for name, f := range ensure {
			together(fmt.Sprintf("round %d %s", round, name), func(js jetstream.JetStream) (jetstream.Stream, error) { return f(js, l) })
		}
		if round < rounds-1 {
			// Each round's streams reserve their storage on every node:
			// 40 rounds' worth ran the cluster out ("insufficient
			// storage"). The last round's stay for the checks below.
			names := jss[0].StreamNames(ctx)
			var all []string
			for name := range names.Name() {
				if name != anchor {
					all = append(all, name)
				}
			}
			require.NoError(t, names.Err())
			for _, name := range all {
				require.NoError(t, jss[0].DeleteStream(ctx, name), "round %d: delete %s", round, name)
			}
		}
	}
	// The streams exist now: an ensure of the same configuration is a
	// create answered with the stream, one of another configuration (the
	// denial limits of replicas restarted with new ones) an update.
	together("existing alerts", func(js jetstream.JetStream) (jetstream.Stream, error) { return streams.EnsureAlerts(ctx, js, l) })
	together("new denial limits", func(js jetstream.JetStream) (jetstream.Stream, error) {
		return streams.EnsureDenials(ctx, js, l, 2*time.Minute, 1<<20)
	})
	s, err := jss[1].Stream(ctx, l.DenialStreamName())
	require.NoError(t, err)
	require.Equal(t, 2*time.Minute, s.CachedInfo().Config.MaxAge)
	require.Equal(t, int64(1<<20), s.CachedInfo().Config.MaxBytes)
}
