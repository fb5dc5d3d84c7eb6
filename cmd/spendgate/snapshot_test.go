package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/service"
	"github.com/spendgate/spendgate/testenv"
)

// TestCLI_Snapshot: spendgate snapshot writes a snapshot at the stream's
// last sequence (folding it as a replica would, no replica needed) and
// --list shows it; a replica started afterwards loads it.
func TestCLI_Snapshot(t *testing.T) {
	env := testenv.New(t)
	r := env.StartSpendgate(t, service.ReplicaConfig{SweepInterval: -1})
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

	r2 := env.StartSpendgate(t, service.ReplicaConfig{SweepInterval: -1})
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
