package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
)

// TestService_TenantShareOfInflight: one tenant flooding its subjects holds
// at most half of a replica's in-flight slots, so another tenant is still
// served. Writes hang (a write fault) while acme sends as many admits as
// the replica has slots: half are served (and hang), the other half are
// answered ledger_busy at once; globex's admit then still gets a slot (no
// ledger_busy). It fails without the tenant's share (tenantShare in
// service.go): acme's admits then take every slot, none is refused, and
// globex's admit is answered ledger_busy.
func TestService_TenantShareOfInflight(t *testing.T) {
	t.Parallel()
	var hang atomic.Bool
	release := make(chan struct{})
	h := newHarness(t, harnessOpts{maxInFlight: 4, ledgerOpts: []ledger.Option{
		ledger.UnsafeWriteFaultForTesting(func(ctx context.Context, _ []string) error {
			if !hang.Load() {
				return nil
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}),
	}})
	ctx := ctxT(t)
	for _, tenant := range []string{"acme", "globex"} {
		c, err := client.New(h.nc, client.WithPrefix(h.env.Layout.TenantEndpoint(tenant, "")))
		require.NoError(t, err)
		_, err = c.PutBudget(ctx, events.BudgetPutRequest{Scope: "team:search", Period: "month", Limit: "100", Unit: "USD"})
		require.NoError(t, err)
	}
	hang.Store(true)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	inbox := nats.NewInbox()
	replies := make(chan *nats.Msg, 16)
	sub, err := h.nc.ChanSubscribe(inbox+".>", replies)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	admit := func(tenant, id string) {
		data, err := json.Marshal(events.AdmitRequest{RequestID: id, Scopes: []string{"team:search"}, Amount: "1", TTL: "1m"})
		require.NoError(t, err)
		require.NoError(t, h.nc.PublishRequest(h.env.Layout.TenantEndpoint(tenant, "admit"), inbox+"."+tenant+"."+id, data))
		require.NoError(t, h.nc.Flush())
	}
	busy := func(m *nats.Msg) bool { return m.Header.Get("Nats-Service-Error") == string(events.CodeLedgerBusy) }

	for i := range 4 {
		admit("acme", fmt.Sprintf("a-%d", i))
	}
	// Half of acme's admits are refused at once; the others hang in flight.
	for refused := 0; refused < 2; {
		select {
		case m := <-replies:
			require.True(t, busy(m), "an acme admit answered while writes hang: %s", m.Data)
			refused++
		case <-time.After(5 * time.Second):
			require.Failf(t, "acme took every slot", "%d of acme's 4 admits refused", refused)
		}
	}
	admit("globex", "g-0")
	select {
	case m := <-replies:
		require.Failf(t, "globex not served while acme floods", "%s: %s %s", m.Subject, m.Header, m.Data)
	case <-time.After(300 * time.Millisecond):
		// globex holds a slot: its admit waits on the hung write, as
		// acme's two do.
	}
	close(release)
	released = true
	for got := 0; got < 3; got++ {
		select {
		case m := <-replies:
			require.False(t, busy(m), "%s: %s", m.Subject, m.Data)
			var ar events.AdmitReply
			require.NoError(t, json.Unmarshal(m.Data, &ar), string(m.Data))
			require.True(t, ar.Admitted, "%s: %s", m.Subject, m.Data)
		case <-time.After(10 * time.Second):
			require.Failf(t, "admits in flight not answered", "%d of 3", got)
		}
	}
}
