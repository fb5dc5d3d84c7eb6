package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// keysServe starts an embedded serve (bin: procBin's or raceBin) on a
// fresh data dir with the default keys (kept in the data dir) and returns
// it, its data dir, its URL and a JetStream handle.
func keysServe(t *testing.T, bin string, extra ...string) (*proc, string, string, jetstream.JetStream) {
	t.Helper()
	dataDir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	p := startProcBin(t, bin, testDir(t), nil, true, append([]string{"serve", "--data-dir", dataDir, "--listen", listen}, extra...)...)
	url := "nats://" + listen
	js, err := jetstream.New(connect(t, url))
	require.NoError(t, err)
	return p, dataDir, url, js
}

// rawPut publishes data under key straight to the ledger stream, as `nats
// kv put` does for any identity allowed to write the bucket's subjects.
func rawPut(t *testing.T, js jetstream.JetStream, key string, data []byte, h nats.Header) uint64 {
	t.Helper()
	layout, err := streams.New(streams.Config{})
	require.NoError(t, err)
	msg := nats.NewMsg(layout.Subject(key))
	msg.Data = data
	for k, v := range h {
		msg.Header[k] = v
	}
	ack, err := js.PublishMsg(context.Background(), msg)
	require.NoError(t, err)
	return ack.Sequence
}

// TestSecure_ForgeryAndGarbage: two attacks on the ledger, with the binary.
// A forged budget (the same JSON with a bigger limit, correctly chained,
// written straight to the bucket) is skipped: an admit of 500 against the
// original 1.00 limit is denied, and audit check fails naming the forged
// sequence. A garbage write to lane.0: the service keeps answering within
// a second with the balances unchanged, and the live feed relays neither
// and keeps relaying. Then docs/security.md's recovery step:
// audit check --reviewed with both sequences passes. How we know it can
// fail: before signatures the admit of 500 was admitted and audit check
// said OK; before skip-and-serve the garbage stopped the replica.
func TestSecure_ForgeryAndGarbage(t *testing.T) {
	t.Parallel()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	_, dataDir, url, js := keysServe(t, procBin("serve"), "--http", httpAddr, "--feed")
	cli := func(args ...string) (int, []byte) { t.Helper(); return e2eCLI(t, url, args...) }
	code, _ := cli("budget", "put", "--scope", "org:t1", "--period", "month", "--limit", "1.00", "--unit", "USD")
	require.Equal(t, 0, code)
	code, _ = cli("admit", "--scope", "org:t1", "--amount", "0.40")
	require.Equal(t, 0, code)

	// The forgery.
	bkey := streams.BudgetKey(events.BudgetRef{Scope: "org:t1", Period: events.PeriodMonth})
	layout, err := streams.New(streams.Config{})
	require.NoError(t, err)
	s, err := js.Stream(context.Background(), layout.StreamName())
	require.NoError(t, err)
	cur, err := s.GetLastMsgForSubject(context.Background(), layout.Subject(bkey))
	require.NoError(t, err)
	var rev map[string]any
	require.NoError(t, json.Unmarshal(cur.Data, &rev))
	// The limit and the event that defines it, so that nothing but the
	// signature tells the forgery from a revision.
	rev["limit"] = "500"
	rev["events"].([]any)[0].(map[string]any)["limit"] = "500"
	rev["prev"] = cur.Sequence
	rev["prev_hash"] = events.HashPayload(cur.Data)
	forged, err := json.Marshal(rev)
	require.NoError(t, err)
	forgedSeq := rawPut(t, js, bkey, forged, nil)

	code, out := cli("admit", "--scope", "org:t1", "--amount", "500")
	require.Equal(t, 2, code, "denied: %s", out)
	require.Contains(t, string(out), `"limit": "1"`, "denied against the signed limit")

	trusted := filepath.Join(dataDir, "trusted-keys")
	code, out = cli("audit", "check", "--trusted-keys", trusted)
	require.Equal(t, 1, code)
	require.Contains(t, string(out), fmt.Sprintf("seq %d %s: skipped, unsigned", forgedSeq, bkey))

	// The garbage.
	garbageSeq := rawPut(t, js, "lane.0", []byte("garbage"), nil)
	nc := connect(t, url)
	start := time.Now()
	var v events.BudgetView
	require.Nil(t, e2eRequest(t, nc, layout.Endpoint("budget.get"), map[string]string{"scope": "org:t1", "period": "month"}, &v))
	require.Less(t, time.Since(start), time.Second)
	require.Equal(t, "1", v.Limit)
	require.Equal(t, "0.4", v.Reserved)
	code, _ = cli("admit", "--scope", "org:t1", "--amount", "0.50")
	require.Equal(t, 0, code, "the next write lands after the garbage")

	code, out = cli("audit", "check", "--trusted-keys", trusted)
	require.Equal(t, 1, code)
	require.Contains(t, string(out), fmt.Sprintf("seq %d %s: skipped, unsigned", forgedSeq, bkey))
	require.Contains(t, string(out), fmt.Sprintf("seq %d lane.0: skipped, unsigned", garbageSeq))
	require.Contains(t, string(out), ": 2 problems")

	// Counted.
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), `spendgate_revisions_rejected_total{reason="unsigned"} 2`)

	// The live feed relayed the signed events only, and went on past the
	// garbage: the budget, then the two admits.
	feed, err := js.Stream(context.Background(), layout.FeedStreamName())
	require.NoError(t, err)
	testenv.WaitFor(t, 10*time.Second, "the feed relays the second admit", func() bool {
		info, err := feed.Info(context.Background())
		return err == nil && info.State.Msgs >= 3
	})
	info, err := feed.Info(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 3, info.State.Msgs)
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := feed.GetMsg(context.Background(), seq)
		require.NoError(t, err)
		require.NotContains(t, string(m.Data), `"500"`, "the forged budget is not in the feed")
	}

	// Reviewed: listed, no longer a failure.
	code, out = cli("audit", "check", "--trusted-keys", trusted, "--reviewed", fmt.Sprintf("%d,%d", forgedSeq, garbageSeq))
	require.Equal(t, 0, code, string(out))
	require.Contains(t, string(out), "OK, replay equals live")
	require.Contains(t, string(out), "skipped, unsigned, reviewed")
}

// TestSecure_KeyRotationSIGHUP runs docs/security.md's rotation steps with the
// binary on the embedded default (keys kept in the data dir): trust the
// new key, SIGHUP; put the new seed in place of the old, SIGHUP; retire
// the old key at the last sequence it signed (audit keys), SIGHUP. Every
// admit succeeds, nothing is skipped, and audit check with the final list
// passes; a revision signed with the retired key afterwards (a stolen old
// key) is skipped and reported. How we know it can fail: SIGHUP ignored,
// the replica goes on signing with the old key and the retirement makes
// its later revisions untrusted (audit check fails).
func TestSecure_KeyRotationSIGHUP(t *testing.T) {
	t.Parallel()
	// Race-built: the SIGHUP reload (serve.go) swaps the ledger's trust
	// and signer while it serves, and no other test runs it.
	p, dataDir, url, js := keysServe(t, raceBin())
	cli := func(args ...string) (int, []byte) { t.Helper(); return e2eCLI(t, url, args...) }
	code, _ := cli("budget", "put", "--scope", "org:r", "--period", "month", "--limit", "100", "--unit", "USD")
	require.Equal(t, 0, code)
	admit := func() {
		t.Helper()
		code, out := cli("admit", "--scope", "org:r", "--amount", "1")
		require.Equal(t, 0, code, string(out))
	}
	admit()
	trusted := filepath.Join(dataDir, "trusted-keys")
	signingKey := filepath.Join(dataDir, "signing.nk")
	oldPub := strings.TrimSpace(runKey(t, signingKey))
	reloads := 0
	hup := func() {
		t.Helper()
		reloads++
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
		testenv.WaitFor(t, 10*time.Second, "keys reloaded", func() bool {
			return strings.Count(p.out.String(), "SIGHUP: keys reloaded") == reloads
		})
	}

	// 1. Trust the new key.
	newKey := filepath.Join(dataDir, "new.nk")
	newPub := strings.TrimSpace(runKey(t, newKey))
	appendFile(t, trusted, newPub+"\n")
	hup()
	admit()
	// 2. Sign with it.
	require.NoError(t, os.Rename(signingKey, filepath.Join(dataDir, "old.nk")))
	require.NoError(t, os.Rename(newKey, signingKey))
	hup()
	admit()
	// 3. Retire the old key after the last revision it signed.
	code, out := cli("audit", "keys")
	require.Equal(t, 0, code)
	m := regexp.MustCompile(regexp.QuoteMeta(oldPub) + ` first=\d+ last=(\d+)`).FindStringSubmatch(string(out))
	require.NotNil(t, m, string(out))
	require.Contains(t, string(out), newPub)
	list, err := os.ReadFile(trusted)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(trusted, []byte(strings.Replace(string(list), oldPub, oldPub+" until="+m[1], 1)), 0o600))
	hup()
	admit()
	code, out = cli("audit", "check", "--trusted-keys", trusted)
	require.Equal(t, 0, code, string(out))
	require.Contains(t, string(out), "revisions signed by trusted keys")
	require.NotContains(t, p.out.String(), "revision skipped")

	// The old key, stolen, signs a forgery: skipped and reported.
	old, err := signing.LoadSigner(filepath.Join(dataDir, "old.nk"))
	require.NoError(t, err)
	data := []byte(`{"schema":"lane.v2","prev":0,"prev_hash":"","balances":[]}`)
	h := nats.Header{}
	old.Sign(h, "lane.0", data)
	seq := rawPut(t, js, "lane.0", data, h)
	admit()
	code, out = cli("audit", "check", "--trusted-keys", trusted)
	require.Equal(t, 1, code)
	require.Contains(t, string(out), fmt.Sprintf("seq %d lane.0: skipped, retired-key", seq))
	testenv.WaitFor(t, 10*time.Second, "the replica logs the skip", func() bool {
		return strings.Contains(p.out.String(), "revision skipped")
	})
}

func runKey(t *testing.T, file string) string {
	t.Helper()
	res := runCLI(t, nil, "key", "--file", file)
	require.Equal(t, 0, res.code, res.stderr)
	return res.stdout
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(s)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// TestSecure_LostKeyEmbedded: the embedded server's seed file is lost. serve
// makes a new key, which its trusted-keys list does not name; it must not
// serve with it, or it would acknowledge admissions whose revisions every
// replica skips, itself at the next restart (an admitted reservation gone).
// It refuses to start and names the key; once the operator adds that key
// to the list (docs/security.md's recovery) it serves, and its admissions
// survive a restart. Retiring the key in use on SIGHUP is refused the same
// way, and the replica keeps its keys. How we know it can fail: before
// the check serve warned and served, and after a restart the admitted
// reservation was gone (reserved 0).
func TestSecure_LostKeyEmbedded(t *testing.T) {
	t.Parallel()
	p, dataDir, url, _ := keysServe(t, procBin("serve"))
	cli := func(args ...string) (int, []byte) { t.Helper(); return e2eCLI(t, url, args...) }
	code, _ := cli("budget", "put", "--scope", "org:k", "--period", "month", "--limit", "100", "--unit", "USD")
	require.Equal(t, 0, code)
	p.stop(t)
	require.NoError(t, os.Remove(filepath.Join(dataDir, "signing.nk")))

	listen := strings.TrimPrefix(url, "nats://")
	args := []string{"serve", "--data-dir", dataDir, "--listen", listen}
	p = startProc(t, false, args...)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("serve started with an untrusted signing key:\n%s", p.out.String())
	}
	require.Error(t, p.err)
	m := regexp.MustCompile(`the signing key (U[A-Z0-9]+) is not trusted for new revisions`).FindStringSubmatch(p.out.String())
	require.NotNil(t, m, p.out.String())
	require.Equal(t, m[1], strings.TrimSpace(runKey(t, filepath.Join(dataDir, "signing.nk"))))

	trusted := filepath.Join(dataDir, "trusted-keys")
	appendFile(t, trusted, m[1]+"\n")
	p = startProc(t, true, args...)
	code, out := cli("admit", "--scope", "org:k", "--amount", "7", "--ttl", "1h")
	require.Equal(t, 0, code, string(out))
	p.stop(t)
	p = startProc(t, true, args...)
	code, out = cli("budget", "get", "--scope", "org:k")
	require.Equal(t, 0, code, string(out))
	require.Contains(t, string(out), `"reserved": "7"`)

	// Retiring the key in use: refused on SIGHUP, the old keys stay.
	list, err := os.ReadFile(trusted)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(trusted, []byte(strings.Replace(string(list), m[1], m[1]+" until=1", 1)), 0o600))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	testenv.WaitFor(t, 10*time.Second, "reload refused", func() bool {
		return strings.Contains(p.out.String(), "SIGHUP: keys not reloaded")
	})
	code, out = cli("admit", "--scope", "org:k", "--amount", "1")
	require.Equal(t, 0, code, string(out))
	require.NotContains(t, p.out.String(), "revision skipped")
}
