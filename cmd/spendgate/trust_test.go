package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestServe_SecondReplicaDefaultFlags: a second replica started with the
// default flags beside the embedded one either trusts it by construction
// (started from the same directory, it signs with the same data-dir key)
// or refuses to start, naming its key (started from another directory).
// Concurrent admits through both never over-admit nor lose an acknowledged
// reservation. How we know it can fail: before the ledger held its trusted
// keys, the second replica signed with a key kept in memory that the first
// did not trust; the first skipped its revisions and wrote over them, and
// 40 concurrent admits of 0.1 on a budget of 1 got 12 "admitted" answers
// with 10 open in both books.
func TestServe_SecondReplicaDefaultFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	port := testenv.FreePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	startProcIn(t, dir, true, "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--sweep-interval", "1m")

	// From another directory: its own new key, which the ledger does not
	// trust. It refuses to start and says why.
	other := startProcIn(t, t.TempDir(), false, "serve", "--nats-url", url, "--replicas", "1")
	select {
	case <-other.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("a replica the ledger does not trust kept running:\n%s", other.out.String())
	}
	require.Error(t, other.err)
	require.Contains(t, other.out.String(), "is not among the ledger's trusted keys")
	require.Regexp(t, `(?m)^spendgate serve: cannot start: .*not trusted by the ledger\n.*is not among the ledger's trusted keys.*\nadd its public key`,
		other.out.String(), "besides the log line, the error as written, one line per line")

	// From the same directory, default flags: the same key.
	startProcIn(t, dir, true, "serve", "--nats-url", url, "--replicas", "1", "--sweep-interval", "1m")
	nc := connect(t, url)
	testenv.WaitFor(t, 15*time.Second, "two spendgate instances", func() bool { return serviceCount(t, nc) == 2 })
	var v events.BudgetView
	require.Nil(t, e2eRequest(t, nc, streams.DefaultPrefix+streams.EndpointBudgetPut,
		events.BudgetPutRequest{Scope: "org:acme", Period: "month", Limit: "1", Unit: "USD"}, &v))

	const n = 40
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var r events.AdmitReply
			e := e2eRequest(t, nc, streams.DefaultPrefix+streams.EndpointAdmit,
				events.AdmitRequest{Scopes: []string{"org:acme"}, Amount: "0.1", RequestID: fmt.Sprintf("two-%d", i)}, &r)
			if e == nil && r.Admitted {
				mu.Lock()
				acked[r.ReservationID] = true
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	require.Len(t, acked, 10, "exactly the budget's worth admitted")
	served := e2eAdmitsServed(t, nc, 2)
	t.Logf("admits served per process: %v", served)
	// Every acknowledged reservation is open in the ledger: both books hold
	// the ten (a budget read lands on either replica; ask until both
	// answered, bounded).
	answeredBy := map[string]bool{}
	testenv.WaitFor(t, 20*time.Second, "both replicas hold the ten reservations", func() bool {
		var g events.BudgetView
		msg, err := nc.Request(streams.DefaultPrefix+streams.EndpointBudgetGet, []byte(`{"scope":"org:acme","period":"month"}`), 5*time.Second)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(msg.Data, &g))
		if g.Reserved == "1" && g.Open == 10 {
			answeredBy[msg.Header.Get("Nats-Service-Instance")+fmt.Sprint(len(answeredBy))] = true
		}
		return len(answeredBy) >= 6
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ks, err := signing.ParseKeys(filepath.Join(dir, "spendgate-data", "trusted-keys"))
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	rep, err := projector.Check(ctx, js, streams.Default(), projector.WithTrust(ks))
	require.NoError(t, err)
	require.True(t, rep.OK(), "invariant check: %s", rep)
	require.Empty(t, rep.Skipped, "no revision skipped: %s", rep)
}
