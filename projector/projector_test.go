package projector_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

var (
	acme = events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}
	// acmeDay shares acme's scope, hence its lane, and sorts before it.
	acmeDay = events.BalanceRef{Scope: "org:acme", Period: events.PeriodDay, Instance: "2026-11-30"}
	u17     = events.BalanceRef{Scope: "user:u-17", Period: events.PeriodDay, Instance: "2026-11-30"}
	t0      = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

	// lanes2 is a layout of two lanes that puts acme (and acmeDay) in
	// lane.1 and u17 in lane.0.
	lanes2 = func() streams.Layout {
		c := streams.DefaultConfig()
		c.Lanes = 2
		l, err := streams.New(c)
		if err != nil {
			panic(err)
		}
		return l
	}()
)

func m(s string) events.Money { return events.MustMoney(s) }

// nums are the numbers a balance revision states.
type nums struct {
	unit, limit, spent, reserved, overrun string
	open                                  int64
}

// usd is a USD balance with limit 10.
func usd(spent, reserved, overrun string, open int64) nums {
	return nums{unit: "USD", limit: "10", spent: spent, reserved: reserved, overrun: overrun, open: open}
}

// bal is one balance of a lane revision.
func bal(ref events.BalanceRef, n nums, evs ...events.Event) events.BalanceRevision {
	return events.BalanceRevision{
		Schema: events.SchemaBalance, Balance: ref, Unit: n.unit, Limit: m(n.limit),
		Spent: m(n.spent), Reserved: m(n.reserved), Overrun: m(n.overrun), Open: n.open,
		Events: events.Events(evs),
	}
}

// laneRev is a lane revision naming bals, in the order given.
func laneRev(t testing.TB, bals ...events.BalanceRevision) []byte {
	t.Helper()
	b, err := json.Marshal(events.LaneRevision{Schema: events.SchemaLaneV1, Balances: bals})
	require.NoError(t, err)
	return b
}

// balanceRev is a lane revision naming one balance.
func balanceRev(t testing.TB, ref events.BalanceRef, n nums, evs ...events.Event) []byte {
	t.Helper()
	return laneRev(t, bal(ref, n, evs...))
}

func budgetRev(t testing.TB, ref events.BudgetRef, limit, unit string) []byte {
	t.Helper()
	b, err := json.Marshal(events.BudgetRevision{
		Schema: events.SchemaBudgetV1, Budget: ref, Limit: m(limit), Unit: unit,
		Events: events.Events{events.BudgetDefined{Budget: ref, Limit: m(limit), Unit: unit, At: t0}},
	})
	require.NoError(t, err)
	return b
}

func opened(id string, in events.BalanceRef, amount string, all ...events.BalanceRef) events.ReservationOpened {
	if len(all) == 0 {
		all = []events.BalanceRef{in}
	}
	return events.ReservationOpened{
		ReservationID: id, RequestID: "req-" + id, RequestHash: "h", Balance: in,
		Amount: m(amount), Unit: "USD", Balances: all, ExpiresAt: t0.Add(time.Minute), At: t0,
	}
}

func settled(id string, in events.BalanceRef, reserved, actual, overrun string) events.ReservationSettled {
	return events.ReservationSettled{
		ReservationID: id, Balance: in, Reserved: m(reserved), Actual: m(actual), Overrun: m(overrun), At: t0.Add(time.Second),
	}
}

func released(id string, in events.BalanceRef, reserved, reason string) events.ReservationReleased {
	return events.ReservationReleased{ReservationID: id, Balance: in, Reserved: m(reserved), Reason: reason, At: t0.Add(2 * time.Minute)}
}

// key is the name of a balance in the book.
func key(ref events.BalanceRef) string { return streams.BalanceKey(ref) }

// lane is the lane key of a balance under lanes2.
func lane(ref events.BalanceRef) string { return lanes2.LaneKey(ref) }

// msg is one stream message for apply.
type msg struct {
	key  string
	data []byte
}

// apply folds msgs at sequences 1, 2, ... into a new State.
func apply(t *testing.T, msgs ...msg) *projector.State {
	t.Helper()
	s := projector.NewState()
	for i, mm := range msgs {
		require.NoError(t, s.Apply(uint64(i+1), mm.key, mm.data), "message %d", i+1)
	}
	return s
}

func TestState_Apply_lifecycle(t *testing.T) {
	budget := acme.Budget()
	// After expiry the reservation was already returned, so all of the
	// late actual is overrun.
	late := settled("r3", acme, "3", "3.1", "3.1")
	late.Late, late.AfterExpiry = true, true
	s := apply(t,
		msg{streams.BudgetKey(budget), budgetRev(t, budget, "10", "USD")},
		msg{lane(acme), balanceRev(t, acme, usd("0", "2", "0", 1), opened("r1", acme, "2"))},
		// Settled above what it reserved: overrun 0.5, recorded in full.
		msg{lane(acme), balanceRev(t, acme, usd("2.5", "0", "0.5", 0), settled("r1", acme, "2", "2.5", "0.5"))},
		// A group commit: two admissions in one revision.
		msg{lane(acme), balanceRev(t, acme, usd("2.5", "4", "0.5", 2), opened("r2", acme, "1"), opened("r3", acme, "3"))},
		msg{lane(acme), balanceRev(t, acme, usd("2.5", "3", "0.5", 1), released("r2", acme, "1", events.ReasonReleased))},
		msg{lane(acme), balanceRev(t, acme, usd("2.5", "0", "0.5", 0), released("r3", acme, "3", events.ReasonExpired))},
		// The late settle after the sweeper expired it: spent grows,
		// reserved and open do not move again.
		msg{lane(acme), balanceRev(t, acme, usd("5.6", "0", "3.6", 0), late)},
	)
	require.Equal(t, uint64(7), s.Position())
	require.Equal(t, 8, s.Events())

	b, ok := s.Balance(acme)
	require.True(t, ok)
	require.Equal(t, "5.6", b.Spent.String())
	require.Equal(t, "0", b.Reserved.String())
	require.Equal(t, "3.6", b.Overrun.String())
	require.Equal(t, "10", b.Limit.String())
	require.Equal(t, "USD", b.Unit)
	require.Equal(t, key(acme), b.Key)
	require.Equal(t, lane(acme), b.Lane)
	require.Equal(t, int64(0), b.Open)
	require.Equal(t, [5]int64{3, 2, 1, 1, 1}, [5]int64{b.Opened, b.Settled, b.Released, b.Expired, b.Late})
	require.Equal(t, uint64(7), b.Revision)
	require.Equal(t, int64(6), b.Revisions)

	r1, ok := s.Reservation("r1")
	require.True(t, ok)
	require.Equal(t, events.StatusSettled, r1.Status)
	require.Equal(t, []uint64{2, 3}, r1.Seqs)
	require.Equal(t, "2.5", r1.Parts[acme].Actual.String())
	require.Equal(t, "0.5", r1.Parts[acme].Overrun.String())

	r2, _ := s.Reservation("r2")
	require.Equal(t, events.StatusReleased, r2.Status)
	require.Equal(t, []uint64{4, 5}, r2.Seqs)

	r3, _ := s.Reservation("r3")
	require.Equal(t, events.StatusSettled, r3.Status)
	require.True(t, r3.Expired)
	require.True(t, r3.Late)
	require.True(t, r3.Parts[acme].AfterExpiry)
	require.Equal(t, "3", r3.Parts[acme].Amount.String())
	require.Equal(t, []uint64{4, 6, 7}, r3.Seqs)

	bd, ok := s.Budget(budget)
	require.True(t, ok)
	require.Equal(t, "10", bd.Limit.String())
	require.Equal(t, uint64(1), bd.Revision)

	require.Len(t, s.Balances(), 1)
	require.Len(t, s.Budgets(), 1)
	require.Equal(t, []string{"r1", "r2", "r3"}, ids(s.Reservations()))
}

func ids(rs []projector.Reservation) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func TestState_Apply_multiBalance(t *testing.T) {
	both := []events.BalanceRef{acme, u17}
	count := nums{unit: events.UnitRequests, limit: "100", spent: "0", reserved: "1", overrun: "0", open: 1}
	countSettled := nums{unit: events.UnitRequests, limit: "100", spent: "1", reserved: "0", overrun: "0", open: 0}
	// One admit across two budgets: one message per balance, committed
	// together; the count budget reserves 1 whatever the amount.
	s := apply(t,
		msg{lane(acme), balanceRev(t, acme, usd("0", "0.05", "0", 1), opened("r1", acme, "0.05", both...))},
		msg{lane(u17), balanceRev(t, u17, count, opened("r1", u17, "1", both...))},
		msg{lane(acme), balanceRev(t, acme, usd("0.04", "0", "0", 0), settled("r1", acme, "0.05", "0.04", "0"))},
		msg{lane(u17), balanceRev(t, u17, countSettled, settled("r1", u17, "1", "1", "0"))},
	)
	r, ok := s.Reservation("r1")
	require.True(t, ok)
	require.Equal(t, events.StatusSettled, r.Status)
	require.Equal(t, both, r.Balances)
	require.Len(t, r.Parts, 2)
	require.Equal(t, "0.05", r.Parts[acme].Amount.String())
	require.Equal(t, "0.04", r.Parts[acme].Actual.String())
	require.Equal(t, "1", r.Parts[u17].Amount.String())
	require.Equal(t, []uint64{1, 3}, r.Parts[acme].Seqs)
	require.Equal(t, []uint64{2, 4}, r.Parts[u17].Seqs)
	require.Equal(t, []uint64{1, 2, 3, 4}, r.Seqs)

	a, _ := s.Balance(acme)
	u, _ := s.Balance(u17)
	require.Equal(t, "0.04", a.Spent.String())
	require.Equal(t, "1", u.Spent.String())
	require.Equal(t, events.UnitRequests, u.Unit)

	// Snapshots are deep copies.
	r.Parts[acme] = projector.ReservationPart{}
	again, _ := s.Reservation("r1")
	require.Equal(t, "0.05", again.Parts[acme].Amount.String())
}

func TestState_Apply_idempotentOnPosition(t *testing.T) {
	first := balanceRev(t, acme, usd("0", "2", "0", 1), opened("r1", acme, "2"))
	s := projector.NewState()
	require.NoError(t, s.Apply(5, lane(acme), first))
	before := s.Clone()

	// Redelivery of the same message, an older one, or anything at a
	// sequence already applied: ignored.
	require.NoError(t, s.Apply(5, lane(acme), first))
	require.NoError(t, s.Apply(3, lane(acme), []byte("not even JSON")))
	require.Equal(t, before, s)
	require.Equal(t, uint64(5), s.Position())

	// Keys of other families are not part of the book of record.
	require.NoError(t, s.Apply(6, "idem.req-1", []byte("whatever")))
	require.Equal(t, uint64(6), s.Position())
	b, _ := s.Balance(acme)
	require.Equal(t, "2", b.Reserved.String())
}

// base is a state with r1 open in acme (2), r2 expired in acme (1), r4
// settled in acme (1), and r5 open in acme and u17 (u17 stays open).
func base(t *testing.T) *projector.State {
	t.Helper()
	both := []events.BalanceRef{acme, u17}
	return apply(t,
		msg{lane(acme), balanceRev(t, acme, usd("0", "4", "0", 3),
			opened("r1", acme, "2"), opened("r2", acme, "1"), opened("r4", acme, "1"))},
		msg{lane(acme), balanceRev(t, acme, usd("1", "2", "0", 1),
			released("r2", acme, "1", events.ReasonExpired), settled("r4", acme, "1", "1", "0"))},
		msg{lane(u17), balanceRev(t, u17, usd("0", "0.5", "0", 1), opened("r5", u17, "0.5", both...))},
	)
}

// afterBase is the acme numbers of base.
var afterBase = usd("1", "2", "0", 1)

func TestState_Apply_invalid(t *testing.T) {
	good := settled("r1", acme, "2", "1", "0")
	afterExpiryOfOpen := good
	afterExpiryOfOpen.AfterExpiry = true
	wrongBalance := good
	wrongBalance.Balance = u17

	for _, tc := range []struct {
		name  string
		key   string
		data  func(t *testing.T) []byte
		is    error
		names string // a substring the message must hold
	}{
		{"settle of a reservation never opened", lane(acme), func(t *testing.T) []byte {
			return balanceRev(t, acme, afterBase, settled("nope", acme, "1", "1", "0"))
		}, projector.ErrTransition, "never opened"},
		{"settle in a balance it was not opened in", lane(u17), func(t *testing.T) []byte {
			return balanceRev(t, u17, usd("1", "0.5", "0", 1), settled("r1", u17, "2", "1", "0"))
		}, projector.ErrTransition, "never opened in balance user:u-17"},
		{"second settle", lane(acme), func(t *testing.T) []byte {
			return balanceRev(t, acme, afterBase, settled("r4", acme, "1", "1", "0"))
		}, projector.ErrTransition, "already settled"},
		{"release of an expired reservation", lane(acme), func(t *testing.T) []byte {
			return balanceRev(t, acme, afterBase, released("r2", acme, "1", events.ReasonReleased))
		}, projector.ErrTransition, "already expired"},
		{"release of a settled reservation", lane(acme), func(t *testing.T) []byte {
			return balanceRev(t, acme, afterBase, released("r4", acme, "1", events.ReasonReleased))
		}, projector.ErrTransition, "already settled"},
		{"release of a reservation never opened", lane(acme), func(t *testing.T) []byte {
			return balanceRev(t, acme, afterBase, released("nope", acme, "1", events.ReasonExpired))
		}, projector.ErrTransition, "never opened"},
		{"second open of the same id in the same balance", lane(acme), func(t *testing.T) []byte {
			return balanceRev(t, acme, usd("1", "3", "0", 2), opened("r4", acme, "1"))
		}, projector.ErrTransition, "opened again"},
		{"settle after expiry of an open reservation", lane(acme), func(t *testing.T) []byte {
			return balanceRev(t, acme, usd("2", "2", "0", 1), afterExpiryOfOpen)
		}, projector.ErrTransition, "not expired"},
		{"settle after expiry of a settled reservation", lane(acme), func(t *testing.T) []byte {
			e := settled("r4", acme, "1", "1", "0")
			e.AfterExpiry = true
			return balanceRev(t, acme, usd("2", "2", "0", 1), e)
		}, projector.ErrTransition, "not expired"},
		{"settle stating another reserved", lane(acme), func(t *testing.T) []byte {
			return balanceRev(t, acme, usd("2", "0.5", "0", 0), settled("r1", acme, "1.5", "1", "0"))
		}, projector.ErrTransition, "opened 2"},
		{"settle stating a wrong overrun", lane(acme), func(t *testing.T) []byte {
			return balanceRev(t, acme, usd("4", "0", "1", 0), settled("r1", acme, "2", "3", "1.5"))
		}, projector.ErrTransition, "gives 1"},
		{"release stating another reserved", lane(acme), func(t *testing.T) []byte {
			return balanceRev(t, acme, usd("1", "1", "0", 0), released("r1", acme, "1", events.ReasonReleased))
		}, projector.ErrTransition, "opened 2"},
		{"release with an unknown reason", lane(acme), func(t *testing.T) []byte {
			return balanceRev(t, acme, usd("1", "0", "0", 0), released("r1", acme, "2", "lost"))
		}, projector.ErrMalformed, `reason "lost"`},
		{"event balance differs from the revision's", lane(acme), func(t *testing.T) []byte {
			return balanceRev(t, acme, usd("2", "0", "0", 0), wrongBalance)
		}, projector.ErrMalformed, "differs from the revision's"},
		{"negative amount", lane(acme), func(t *testing.T) []byte {
			b := balanceRev(t, acme, usd("1", "1", "0", 2), opened("r9", acme, "1"))
			return []byte(strings.Replace(string(b), `"amount":"1"`, `"amount":"-1"`, 1))
		}, projector.ErrTransition, "negative amount"},
		{"budget event in a balance revision", lane(acme), func(t *testing.T) []byte {
			return balanceRev(t, acme, afterBase, events.BudgetDefined{Budget: acme.Budget(), Limit: m("1"), Unit: "USD"})
		}, projector.ErrMalformed, "not a reservation event"},
		{"balance under another lane than the one that first named it", lane(u17), func(t *testing.T) []byte {
			return balanceRev(t, acme, afterBase)
		}, projector.ErrMalformed, "belongs to lane " + lane(acme) + ", which first named it, not to " + lane(u17)},
		{"balance key: a stream of an older layout", key(acme), func(t *testing.T) []byte {
			b, err := json.Marshal(bal(acme, afterBase))
			require.NoError(t, err)
			return b
		}, projector.ErrMalformed, "balance key outside a lane"},
		{"lane revision naming no balance", lane(acme), func(t *testing.T) []byte {
			return laneRev(t)
		}, projector.ErrMalformed, "names no balance"},
		{"lane revision with empty balances", lane(acme), func(t *testing.T) []byte {
			return []byte(`{"schema":"lane.v1","balances":[]}`)
		}, projector.ErrMalformed, "names no balance"},
		{"unknown lane schema", lane(acme), func(t *testing.T) []byte {
			return []byte(strings.Replace(string(balanceRev(t, acme, afterBase)), events.SchemaLaneV1, "lane.v9", 1))
		}, projector.ErrMalformed, "lane.v9"},
		{"a balance revision alone under a lane key", lane(acme), func(t *testing.T) []byte {
			b, err := json.Marshal(bal(acme, afterBase))
			require.NoError(t, err)
			return b
		}, projector.ErrMalformed, "decode"},
		{"balances out of key order", lane(acme), func(t *testing.T) []byte {
			return laneRev(t, bal(acme, afterBase), bal(acmeDay, usd("0", "0", "0", 0)))
		}, projector.ErrMalformed, "out of key order: " + key(acmeDay) + " after " + key(acme)},
		{"a balance named twice", lane(acme), func(t *testing.T) []byte {
			return laneRev(t, bal(acme, afterBase), bal(acme, afterBase))
		}, projector.ErrMalformed, "named twice"},
		{"second balance of a lane revision malformed", lane(acme), func(t *testing.T) []byte {
			day := nums{unit: "USD", limit: "5", spent: "0", reserved: "1", overrun: "0", open: 1}
			b := laneRev(t, bal(acmeDay, day, opened("r9", acmeDay, "1")), bal(acme, afterBase))
			return []byte(strings.Replace(string(b), `"limit":"10"`, `"limit":"-1"`, 1))
		}, projector.ErrMalformed, "balance org:acme/month/2026-11: malformed revision: negative limit -1"},
		{"second balance of a lane revision breaks a transition", lane(acme), func(t *testing.T) []byte {
			return laneRev(t,
				bal(acmeDay, usd("0", "1", "0", 1), opened("r9", acmeDay, "1")),
				bal(acme, afterBase, released("r4", acme, "1", events.ReasonReleased)))
		}, projector.ErrTransition, "balance org:acme/month/2026-11: event 0 (reservation.released.v1)"},
		{"unknown schema", lane(acme), func(t *testing.T) []byte {
			return []byte(strings.Replace(string(balanceRev(t, acme, afterBase)), events.SchemaBalance, "balance.v9", 1))
		}, projector.ErrMalformed, "balance.v9"},
		{"unknown field", lane(acme), func(t *testing.T) []byte {
			return []byte(strings.Replace(string(balanceRev(t, acme, afterBase)), `{"schema"`, `{"extra":1,"schema"`, 1))
		}, projector.ErrMalformed, "extra"},
		{"unknown field in a balance", lane(acme), func(t *testing.T) []byte {
			return []byte(strings.Replace(string(balanceRev(t, acme, afterBase)), `{"schema":"balance.v1"`, `{"extra":1,"schema":"balance.v1"`, 1))
		}, projector.ErrMalformed, "extra"},
		{"trailing data", lane(acme), func(t *testing.T) []byte {
			return append(balanceRev(t, acme, afterBase), "{}"...)
		}, projector.ErrMalformed, "after the revision"},
		{"not JSON", lane(acme), func(*testing.T) []byte { return []byte("{") }, projector.ErrMalformed, "decode"},
		{"empty value", lane(acme), func(*testing.T) []byte { return nil }, projector.ErrMalformed, "empty value"},
		{"unknown unit", lane(acme), func(t *testing.T) []byte {
			n := afterBase
			n.unit = "DOGE"
			return balanceRev(t, acme, n)
		}, projector.ErrMalformed, "DOGE"},
		{"budget revision stating another limit", streams.BudgetKey(acme.Budget()), func(t *testing.T) []byte {
			return []byte(strings.Replace(string(budgetRev(t, acme.Budget(), "10", "USD")), `"limit":"10"`, `"limit":"11"`, 1))
		}, projector.ErrMismatch, "limit: stated 11, folded 10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base(t)
			before := s.Clone()
			err := s.Apply(4, tc.key, tc.data(t))
			require.ErrorIs(t, err, tc.is)
			require.ErrorContains(t, err, tc.names)
			var ae *projector.ApplyError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, uint64(4), ae.Seq)
			require.Equal(t, tc.key, ae.Key)
			// All or nothing: a failing revision changes nothing.
			require.Equal(t, before, s)
		})
	}
}

func TestState_Apply_statedMismatch(t *testing.T) {
	for _, tc := range []struct {
		field, stated, folded string
		n                     nums
	}{
		{"spent", "2.000000001", "2", usd("2.000000001", "0", "0", 0)},
		{"reserved", "0.000000001", "0", usd("2", "0.000000001", "0", 0)},
		{"overrun", "0.1", "0", usd("2", "0", "0.1", 0)},
		{"open", "1", "0", usd("2", "0", "0", 1)},
	} {
		t.Run(tc.field, func(t *testing.T) {
			s := apply(t, msg{lane(acme), balanceRev(t, acme, usd("0", "2", "0", 1), opened("r1", acme, "2"))})
			err := s.Apply(2, lane(acme), balanceRev(t, acme, tc.n, settled("r1", acme, "2", "2", "0")))
			require.ErrorIs(t, err, projector.ErrMismatch)
			var me *projector.MismatchError
			require.ErrorAs(t, err, &me)
			require.Equal(t, projector.MismatchError{Field: tc.field, Stated: tc.stated, Folded: tc.folded}, *me)
			require.EqualError(t, err, "projector: key "+lane(acme)+" seq 2: balance "+acme.String()+": "+
				tc.field+": stated "+tc.stated+", folded "+tc.folded)
			require.Equal(t, uint64(1), s.Position())
		})
	}
}

func TestState_Apply_admission(t *testing.T) {
	t.Run("an admission past the limit", func(t *testing.T) {
		s := apply(t, msg{lane(acme), balanceRev(t, acme, usd("0", "6", "0", 1), opened("r1", acme, "6"))})
		err := s.Apply(2, lane(acme), balanceRev(t, acme, usd("0", "10.000000001", "0", 2), opened("r2", acme, "4.000000001")))
		require.ErrorIs(t, err, projector.ErrInvariant)
		require.ErrorContains(t, err, "exceeds limit 10")
	})
	t.Run("an admission after spend reached the limit", func(t *testing.T) {
		s := apply(t,
			msg{lane(acme), balanceRev(t, acme, usd("0", "6", "0", 1), opened("r1", acme, "6"))},
			msg{lane(acme), balanceRev(t, acme, usd("10.5", "0", "4.5", 0), settled("r1", acme, "6", "10.5", "4.5"))},
		)
		err := s.Apply(3, lane(acme), balanceRev(t, acme, usd("10.5", "0.01", "4.5", 1), opened("r2", acme, "0.01")))
		require.ErrorIs(t, err, projector.ErrInvariant)
	})
	t.Run("exactly at the limit, then an overrun in the same group", func(t *testing.T) {
		// Twenty reservations of 0.05 fit a ceiling of 1.00 exactly; an
		// overrun settled after the admission in the same revision is
		// allowed past the limit.
		evs := make([]events.Event, 0, 21)
		for i := range 20 {
			evs = append(evs, opened("r"+string(rune('a'+i)), acme, "0.05"))
		}
		evs = append(evs, settled("ra", acme, "0.05", "0.5", "0.45"))
		n := nums{unit: "USD", limit: "1.00", spent: "0.5", reserved: "0.95", overrun: "0.45", open: 19}
		s := apply(t, msg{lane(acme), balanceRev(t, acme, n, evs...)})
		b, _ := s.Balance(acme)
		require.Equal(t, "1.45", b.Spent.Add(b.Reserved).String())
	})
}

func TestState_Apply_budget(t *testing.T) {
	ref := acme.Budget()
	s := apply(t,
		msg{streams.BudgetKey(ref), budgetRev(t, ref, "10", "USD")},
		msg{streams.BudgetKey(ref), budgetRev(t, ref, "12.5", "EUR")},
	)
	b, ok := s.Budget(ref)
	require.True(t, ok)
	require.Equal(t, "12.5", b.Limit.String())
	require.Equal(t, "EUR", b.Unit)
	require.Equal(t, int64(2), b.Definitions)
	require.Equal(t, uint64(2), b.Revision)
	require.Equal(t, 2, s.Events())

	err := s.Apply(3, "budget.org.other.month", budgetRev(t, ref, "1", "USD"))
	require.ErrorIs(t, err, projector.ErrMalformed)
}

func TestState_Apply_allOrNothing(t *testing.T) {
	// The first event would apply; the second does not: nothing of the
	// revision lands.
	s := projector.NewState()
	err := s.Apply(1, lane(acme), balanceRev(t, acme, usd("0", "2", "0", 1),
		opened("r1", acme, "2"), released("r1", acme, "2", events.ReasonReleased), released("r1", acme, "2", events.ReasonReleased)))
	require.ErrorIs(t, err, projector.ErrTransition)
	require.ErrorContains(t, err, "event 2 ")
	require.Equal(t, uint64(0), s.Position())
	_, ok := s.Reservation("r1")
	require.False(t, ok)
	_, ok = s.Balance(acme)
	require.False(t, ok)
	require.Zero(t, s.Events())
}

func TestState_Apply_laneOfTwoBalances(t *testing.T) {
	// One admit in two balances of the same lane: one lane revision names
	// both, in key order (acmeDay before acme), and folds both at its seq.
	both := []events.BalanceRef{acmeDay, acme}
	dayNums := func(spent, reserved string, open int64) nums {
		return nums{unit: "USD", limit: "1", spent: spent, reserved: reserved, overrun: "0", open: open}
	}
	s := apply(t,
		msg{lane(acme), laneRev(t,
			bal(acmeDay, dayNums("0", "0.5", 1), opened("r1", acmeDay, "0.5", both...)),
			bal(acme, usd("0", "0.5", "0", 1), opened("r1", acme, "0.5", both...)))},
		// The next revision changes acme only: acmeDay keeps its revision.
		msg{lane(acme), laneRev(t, bal(acme, usd("0.5", "0", "0", 0), settled("r1", acme, "0.5", "0.5", "0")))},
		msg{lane(acme), laneRev(t, bal(acmeDay, dayNums("0.5", "0", 0), settled("r1", acmeDay, "0.5", "0.5", "0")))},
	)
	require.Equal(t, 4, s.Events())

	bs := s.Balances()
	require.Len(t, bs, 2)
	require.Equal(t, []string{key(acmeDay), key(acme)}, []string{bs[0].Key, bs[1].Key})
	for _, b := range bs {
		require.Equal(t, lane(acme), b.Lane)
		require.Equal(t, "0.5", b.Spent.String())
		require.Equal(t, int64(2), b.Revisions)
	}
	require.Equal(t, uint64(3), bs[0].Revision) // acmeDay: seqs 1 and 3
	require.Equal(t, uint64(2), bs[1].Revision) // acme: seqs 1 and 2

	r, ok := s.Reservation("r1")
	require.True(t, ok)
	require.Equal(t, events.StatusSettled, r.Status)
	require.Equal(t, []uint64{1, 2, 3}, r.Seqs)
	require.Equal(t, []uint64{1, 3}, r.Parts[acmeDay].Seqs)
	require.Equal(t, []uint64{1, 2}, r.Parts[acme].Seqs)

	// After the first revision alone, both balances were at seq 1.
	first := apply(t, msg{lane(acme), laneRev(t,
		bal(acmeDay, dayNums("0", "0.5", 1), opened("r1", acmeDay, "0.5", both...)),
		bal(acme, usd("0", "0.5", "0", 1), opened("r1", acme, "0.5", both...)))})
	for _, b := range first.Balances() {
		require.Equal(t, uint64(1), b.Revision)
		require.Equal(t, int64(1), b.Revisions)
		require.Equal(t, "0.5", b.Reserved.String())
	}
	r, _ = first.Reservation("r1")
	require.Equal(t, events.StatusOpen, r.Status)
	require.Equal(t, []uint64{1}, r.Seqs)
}

func TestState_Apply_laneAllOrNothing(t *testing.T) {
	// The first balance of the lane revision folds; the second states a
	// wrong spent: neither lands, and the position stays.
	both := []events.BalanceRef{acmeDay, acme}
	s := apply(t, msg{lane(u17), balanceRev(t, u17, usd("0", "1", "0", 1), opened("r0", u17, "1"))})
	before := s.Clone()
	err := s.Apply(2, lane(acme), laneRev(t,
		bal(acmeDay, usd("0", "2", "0", 1), opened("r1", acmeDay, "2", both...)),
		bal(acme, usd("0.1", "2", "0", 1), opened("r1", acme, "2", both...))))
	require.ErrorIs(t, err, projector.ErrMismatch)
	var me *projector.MismatchError
	require.ErrorAs(t, err, &me)
	require.Equal(t, "spent", me.Field)
	require.ErrorContains(t, err, "balance "+acme.String()+": spent: stated 0.1, folded 0")
	require.Equal(t, before, s)
	require.Equal(t, uint64(1), s.Position())
	_, ok := s.Balance(acmeDay)
	require.False(t, ok)
	_, ok = s.Reservation("r1")
	require.False(t, ok)
	require.Equal(t, 1, s.Events())

	// The same revision stated right applies, at the same seq.
	require.NoError(t, s.Apply(2, lane(acme), laneRev(t,
		bal(acmeDay, usd("0", "2", "0", 1), opened("r1", acmeDay, "2", both...)),
		bal(acme, usd("0", "2", "0", 1), opened("r1", acme, "2", both...)))))
	require.Equal(t, uint64(2), s.Position())
	require.Len(t, s.Balances(), 3)
}

func TestState_Apply_laneStaysPut(t *testing.T) {
	// A balance belongs to the lane that first named it, whatever lane
	// names other balances of its scope.
	s := apply(t, msg{"lane.7", balanceRev(t, acme, usd("0", "1", "0", 1), opened("r1", acme, "1"))})
	b, _ := s.Balance(acme)
	require.Equal(t, "lane.7", b.Lane)
	err := s.Apply(2, "lane.3", balanceRev(t, acme, usd("0", "0", "0", 0), released("r1", acme, "1", events.ReasonReleased)))
	require.ErrorIs(t, err, projector.ErrMalformed)
	require.ErrorContains(t, err, "balance "+acme.String()+": malformed revision: belongs to lane lane.7")
	require.NoError(t, s.Apply(2, "lane.7", balanceRev(t, acme, usd("0", "0", "0", 0), released("r1", acme, "1", events.ReasonReleased))))
}
