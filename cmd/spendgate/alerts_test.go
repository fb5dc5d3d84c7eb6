package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/alerting"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// TestAlerts_WebhookSIGHUP runs the webhook sink as the binary and follows
// the key rotation steps of docs/security.md: a replica's new key is added
// to the sink's --trusted-keys file and the sink is sent SIGHUP, as the
// replicas are. A list that does not parse is refused with the old keys
// kept (an alert the old key signed is still delivered); the list with the
// new key is read, and an alert the new key signed is delivered. How we
// know it can fail: the sink handled only SIGINT and SIGTERM, so the first
// SIGHUP killed it (the wait for its log line fails, the process gone).
func TestAlerts_WebhookSIGHUP(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	_, err := streams.EnsureAlerts(ctx, env.JS, env.Layout)
	require.NoError(t, err)
	oldKey, err := signing.NewEphemeral()
	require.NoError(t, err)
	newKey, err := signing.NewEphemeral()
	require.NoError(t, err)
	trusted := filepath.Join(t.TempDir(), "trusted-keys")
	require.NoError(t, os.WriteFile(trusted, []byte(oldKey.PublicKey()+"\n"), 0o600))

	var mu sync.Mutex
	var got []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b alerting.WebhookBody
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, b.Alert.ID)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	delivered := func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(got, id)
	}

	p := startProc(t, false, "alerts", "webhook", "--nats-url", env.URL(), "--url", hook.URL, "--trusted-keys", trusted, "--listen", "")
	alive := func() {
		t.Helper()
		select {
		case <-p.done:
			t.Fatalf("the sink exited: %v\n%s", p.err, p.out.String())
		default:
		}
	}
	testenv.WaitFor(t, 30*time.Second, "the sink's consumer", func() bool {
		alive()
		_, err := env.JS.Consumer(ctx, env.Layout.AlertStreamName(), alerting.DefaultDurable)
		return err == nil
	})
	n := 0
	publish := func(s *signing.Signer) string {
		t.Helper()
		n++
		a := events.BlockingAlert(events.BalanceRef{Scope: "team:search", Period: events.PeriodMonth, Instance: "2026-12"},
			"USD", events.MustMoney("10"), events.MustMoney("9.9"), "1", "req", uint64(n), time.Now())
		data, err := events.EncodeAlert(a)
		require.NoError(t, err)
		msg := nats.NewMsg(env.Layout.AlertMsgSubject(a))
		msg.Data = data
		s.SignMsg(msg.Header, signing.DomainAlert, msg.Subject, data)
		_, err = env.JS.PublishMsg(ctx, msg)
		require.NoError(t, err)
		return a.ID
	}
	hup := func(logged string) {
		t.Helper()
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
		testenv.WaitFor(t, 10*time.Second, logged, func() bool {
			alive()
			return strings.Contains(p.out.String(), logged)
		})
	}

	// A list that does not parse: refused, the old key still trusted.
	require.NoError(t, os.WriteFile(trusted, []byte(oldKey.PublicKey()+"\nnot-a-key\n"), 0o600))
	hup("SIGHUP: trusted keys not reloaded; the old ones stay in use")
	id := publish(oldKey)
	testenv.WaitFor(t, 30*time.Second, "the old key's alert delivered", func() bool { return delivered(id) })

	// The new key added: read on SIGHUP, its alert delivered.
	require.NoError(t, os.WriteFile(trusted, []byte(oldKey.PublicKey()+"\n"+newKey.PublicKey()+"\n"), 0o600))
	hup("SIGHUP: trusted keys reloaded")
	require.Contains(t, p.out.String(), newKey.PublicKey())
	id = publish(newKey)
	testenv.WaitFor(t, 30*time.Second, "the new key's alert delivered", func() bool { return delivered(id) })
	require.NotContains(t, p.out.String(), "held for a key reload")
	p.stop(t)
}
