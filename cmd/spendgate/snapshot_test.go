package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestCLI_Snapshot: spendgate snapshot writes a snapshot at the stream's
// last sequence (folding it as a replica would, no replica needed) and
// --list shows it; a replica started afterwards loads it.
func TestCLI_Snapshot(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	r := replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	code, _ := e2eCLI(t, env.URL(), "budget", "put", "--scope", "org:acme", "--period", "month", "--limit", "10", "--unit", "USD")
	require.Equal(t, 0, code)
	code, _ = e2eCLI(t, env.URL(), "admit", "--scope", "org:acme", "--amount", "1")
	require.Equal(t, 0, code)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, r.Ledger.Sync(ctx))

	code, out := e2eCLI(t, env.URL(), "snapshot", "--unverified")
	require.Equal(t, 0, code)
	var got snapshotOut
	require.NoError(t, json.Unmarshal(out, &got))
	require.EqualValues(t, 2, got.Seq, "a budget and an admit")
	require.NotZero(t, got.Size)

	code, out = e2eCLI(t, env.URL(), "snapshot", "--list")
	require.Equal(t, 0, code)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 1)
	var listed snapshotOut
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &listed))
	require.Equal(t, got, listed)

	// audit check compares the snapshot with its replay at seq 2.
	code, out = e2eCLI(t, env.URL(), "audit", "check", "--unverified")
	require.Equal(t, 0, code)
	require.Contains(t, string(out), "snapshot "+got.Name+" equals the replay at seq 2")

	r2 := replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	require.Equal(t, got.Seq, r2.Ledger.SnapshotStats().Loaded)
	require.Len(t, r2.Ledger.Budgets(), 1)

	// A snapshot that lies (a balance's reserved amount changed, its
	// digest recomputed so it passes its own integrity check) is reported
	// by audit check, which compares it with the replay.
	store, err := env.JS.ObjectStore(ctx, env.Layout.SnapshotBucket())
	require.NoError(t, err)
	data, err := store.GetBytes(ctx, got.Name)
	require.NoError(t, err)
	head, body, ok := bytes.Cut(data, []byte("\n"))
	require.True(t, ok)
	forged := bytes.Replace(body, []byte(`"reserved":"1"`), []byte(`"reserved":"2"`), 1)
	require.NotEqual(t, body, forged)
	var h map[string]any
	require.NoError(t, json.Unmarshal(head, &h))
	sum := sha256.Sum256(forged)
	h["size"], h["sha256"] = len(forged), hex.EncodeToString(sum[:])
	head, err = json.Marshal(h)
	require.NoError(t, err)
	_, err = store.PutBytes(ctx, got.Name, append(append(head, '\n'), forged...))
	require.NoError(t, err)
	code, out = e2eCLI(t, env.URL(), "audit", "check", "--unverified")
	require.Equal(t, 1, code)
	require.Contains(t, string(out), "snapshot "+got.Name+": balance")
}

// TestCLI_SnapshotAfterASkippedForgery: an unsigned budget revision with a
// forged limit, which the replica rightly skipped, does not become live
// through spendgate snapshot: the snapshot folds as the replica does
// (verifying against --trusted-keys) and signs with --signing-key, and a
// replica started from it serves the signed limit. Without the keys the
// command refuses to run. How we know it can fail: the command used to
// fold without checking signatures, so the documented snapshot plus a
// restart made the forged limit live.
func TestCLI_SnapshotAfterASkippedForgery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	port := testenv.FreePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	args := []string{"serve", "--data-dir", filepath.Join(dir, "data"), "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--sweep-interval", "1m"}
	srv := startProc(t, true, args...)
	code, _ := e2eCLI(t, url, "budget", "put", "--scope", "org:acme", "--period", "month", "--limit", "1", "--unit", "USD")
	require.Equal(t, 0, code)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := connect(t, url)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	layout := streams.Default()
	s, err := js.Stream(ctx, layout.StreamName())
	require.NoError(t, err)
	key := streams.BudgetKey(events.BudgetRef{Scope: "org:acme", Period: events.PeriodMonth})
	cur, err := s.GetLastMsgForSubject(ctx, layout.Subject(key))
	require.NoError(t, err)
	var rev events.BudgetRevision
	require.NoError(t, json.Unmarshal(cur.Data, &rev))
	rev.Limit = events.MustMoney("1000000")
	rev.Chain = events.Chain{Prev: cur.Sequence, PrevHash: events.HashPayload(cur.Data)}
	forged, err := json.Marshal(rev)
	require.NoError(t, err)
	_, err = js.Publish(ctx, layout.Subject(key), forged)
	require.NoError(t, err)

	code, _, stderr := e2eCLIErr(t, url, "snapshot")
	require.Equal(t, exitUsage, code, "without the keys it refuses")
	require.Contains(t, stderr, "--trusted-keys")
	code, out := e2eCLI(t, url, "snapshot", "--trusted-keys", filepath.Join(dir, "data", "trusted-keys"), "--signing-key", filepath.Join(dir, "data", "signing.nk"))
	require.Equal(t, 0, code, string(out))

	srv.stop(t)
	startProc(t, true, args...)
	code, out = e2eCLI(t, url, "budget", "get", "--scope", "org:acme", "--period", "month")
	require.Equal(t, 0, code)
	var v events.BudgetView
	require.NoError(t, json.Unmarshal(out, &v))
	require.Equal(t, "1", v.Limit, "the signed limit, not the forged one")
	code, _ = e2eCLI(t, url, "admit", "--scope", "org:acme", "--amount", "500")
	require.Equal(t, 2, code, "denied")
}
