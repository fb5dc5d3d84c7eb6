package service_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/soak"
	"github.com/spendgate/spendgate/projector"
)

// TestReplicas_MixedWorkloadBooksAgree: three replicas take 384 admits
// (192 with maximal metadata) of one to three scopes (of 8 orgs, month and
// day budgets each, sized so that some run out), closing about half of
// them, some by two racing settles through two replicas: on 1, 3 and 8
// lanes (single lane revisions, and atomic batches over lanes), and on one
// lane with maximal metadata (a full group then nears the message size
// limit). Every admit gets an answer, every replica's book agrees with the
// projector's independent replay to the last digit, and the harness then
// runs the invariant check, which fails on any over-admission. (Adapted
// from the review of the lanes change, which also ran it with a 10 ms
// commit timeout.)
//
// .ci/run's soak step (SPENDGATE_SOAK) runs it at its former size, 768
// admits (512 with maximal metadata): that took four minutes under -race
// on two busy cores, too long for the 4-minute test command.
func TestReplicas_MixedWorkloadBooksAgree(t *testing.T) {
	for _, tc := range []struct {
		lanes int
		big   bool
	}{{1, false}, {3, false}, {8, false}, {1, true}} {
		t.Run(fmt.Sprintf("lanes=%d,big=%v", tc.lanes, tc.big), func(t *testing.T) { mixedWorkload(t, tc.lanes, tc.big) })
	}
}

func mixedWorkload(t *testing.T, lanes int, big bool) {
	h := newHarness(t, harnessOpts{replicas: 3, lanes: lanes, ledgerOpts: []ledger.Option{ledger.WithMaxGroup(64)}})
	// Admits per caller; the budgets are sized for 12 of them (about 27
	// USD reserved per org, before closes) and scaled with it, so that
	// some run out whatever the size.
	perCaller := 6
	switch {
	case big && soak.Long():
		perCaller = 8
	case big:
		perCaller = 3
	case soak.Long():
		perCaller = 12
	}
	scopes := []string{}
	for i := 0; i < 8; i++ {
		s := fmt.Sprintf("org:o%d", i)
		scopes = append(scopes, s)
		h.putBudget(s, "month", fmt.Sprint(40*perCaller/12), "USD")
		h.putBudget(s, "day", fmt.Sprint(30*perCaller/12), "USD")
	}
	var meta map[string]string
	if big {
		meta = map[string]string{}
		for i := 0; i < events.MaxMetadata; i++ {
			meta[fmt.Sprintf("k%02d_%s", i, strings.Repeat("x", 60))] = strings.Repeat("v", events.MaxMetaLen)
		}
	}
	for _, r := range h.replicas {
		require.NoError(t, r.Ledger.Sync(ctxT(t)))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ids []string
	var errsN int
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := 0; i < perCaller; i++ {
				rep := h.replicas[rng.IntN(3)]
				n := 1 + rng.IntN(3)
				var sc []string
				for _, k := range rng.Perm(len(scopes))[:n] {
					sc = append(sc, scopes[k])
				}
				amt := []string{"0.1", "0.25", "0.5"}[rng.IntN(3)]
				r, err := rep.Admitter.Admit(ctxT(t), events.AdmitRequest{RequestID: fmt.Sprintf("g%d-%d", g, i), Scopes: sc, Amount: amt, Metadata: meta})
				if err != nil {
					t.Errorf("admit: %v", err)
					mu.Lock()
					errsN++
					mu.Unlock()
					continue
				}
				if r.Admitted {
					mu.Lock()
					ids = append(ids, r.ReservationID)
					mu.Unlock()
					// Close about half of them, through any replica, sometimes twice at once.
					switch rng.IntN(4) {
					case 0:
						id := r.ReservationID
						var w sync.WaitGroup
						for k := 0; k < 2; k++ {
							w.Add(1)
							go func() {
								defer w.Done()
								_, _ = h.replicas[(k+g)%3].Settler.Settle(ctxT(t), events.SettleRequest{ReservationID: id, Actual: "0.3"})
							}()
						}
						w.Wait()
					case 1:
						_, _ = h.replicas[rng.IntN(3)].Settler.Release(ctxT(t), events.ReleaseRequest{ReservationID: r.ReservationID})
					}
				}
			}
		}()
	}
	wg.Wait()
	// Every replica's book equals the projector's replay.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := projector.New(h.env.JS, h.env.Layout).CatchUp(ctx)
	require.NoError(t, err)
	for i, r := range h.replicas {
		require.NoError(t, r.Ledger.Sync(ctx))
		for _, b := range st.Balances() {
			lb := r.Ledger.Balance(b.Ref)
			require.Equal(t, b.Reserved.String(), lb.Reserved.String(), "replica %d %s reserved", i, b.Key)
			require.Equal(t, b.Spent.String(), lb.Spent.String(), "replica %d %s spent", i, b.Key)
			require.Equal(t, int(b.Open), lb.Open, "replica %d %s open", i, b.Key)
		}
		for _, pr := range st.Reservations() {
			lr, ok := r.Ledger.Reservation(pr.ID)
			if ok {
				require.Equal(t, pr.Status, lr.Status, "replica %d reservation %s", i, pr.ID)
			}
		}
	}
	var commits, batches, conflicts int64
	for _, r := range h.replicas {
		s := r.Ledger.Stats()
		commits += s.Commits
		batches += s.Batches
		conflicts += s.Conflicts
	}
	t.Logf("errors %d, reservations %d, balances %d, commits %d, batches %d, conflicts %d", errsN, len(ids), len(st.Balances()), commits, batches, conflicts)
}
