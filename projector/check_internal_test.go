package projector

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// entry is a live KV value for compareLane.
type entry struct {
	key   string
	value []byte
	rev   uint64
}

func (e entry) Bucket() string                  { return streams.DefaultBucket }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.value }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return time.Time{} }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// laneJSON is a lane revision naming bals.
func laneJSON(t *testing.T, bals ...events.BalanceRevision) []byte {
	t.Helper()
	b, err := json.Marshal(events.LaneRevision{Schema: events.SchemaLaneV1, Balances: bals})
	require.NoError(t, err)
	return b
}

func TestCompareLane(t *testing.T) {
	ref := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}
	other := events.BalanceRef{Scope: "org:other", Period: events.PeriodMonth, Instance: "2026-11"}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	good := events.BalanceRevision{
		Schema: events.SchemaBalance, Balance: ref, Unit: "USD", Limit: events.MustMoney("10"),
		Reserved: events.MustMoney("1"), Open: 1,
		Events: events.Events{events.ReservationOpened{
			ReservationID: "r1", RequestID: "q1", Balance: ref, Amount: events.MustMoney("1"), Unit: "USD",
			Balances: []events.BalanceRef{ref}, ExpiresAt: at.Add(time.Minute), At: at,
		}},
	}
	st := NewState()
	require.NoError(t, st.Apply(3, "lane.0", laneJSON(t, good)))
	key := streams.BalanceKey(ref)

	for _, tc := range []struct {
		name string
		e    entry
		want []string
	}{
		{"equal", entry{"lane.0", laneJSON(t, good), 3}, nil},
		{"a live lane never replayed", entry{"lane.1", laneJSON(t, good), 3},
			[]string{"lane lane.1: live at revision 3 but never replayed"}},
		{"another revision", entry{"lane.0", laneJSON(t, good), 2},
			[]string{"lane lane.0: live revision 2, replay's last revision 3"}},
		{"undecodable", entry{"lane.0", []byte(`{"schema":"lane.v1","balances":[],"x":1}`), 3},
			[]string{`lane lane.0: live value: malformed revision: decode: json: unknown field "x"`}},
		{"another schema", entry{"lane.0", []byte(`{"schema":"lane.v9","balances":[]}`), 3},
			[]string{`lane lane.0: live value: events: schema "lane.v9" under a lane key, want "lane.v2" or "lane.v1"`}},
		{"other numbers", entry{"lane.0", func() []byte {
			b := good
			b.Spent, b.Limit, b.Open, b.Unit = events.MustMoney("0.5"), events.MustMoney("11"), 2, "EUR"
			return laneJSON(t, b)
		}(), 3}, []string{
			"balance " + key + ": live spent 0.5, replayed 0",
			"balance " + key + ": live limit 11, replayed 10",
			"balance " + key + ": live open 2, replayed 1",
			"balance " + key + `: live unit "EUR", replayed "USD"`,
		}},
		{"a balance never replayed", entry{"lane.0", func() []byte {
			b := good
			b.Balance = other
			return laneJSON(t, good, b)
		}(), 3}, []string{"balance " + streams.BalanceKey(other) + ": live in lane lane.0 at revision 3 but never replayed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &Report{}
			compareLane(rep, st, tc.e.key, tc.e, nil)
			require.Equal(t, tc.want, rep.Problems)
		})
	}
}

func TestCheckInvariants_quarantinedLane(t *testing.T) {
	// A reservation across two lanes whose second lane never folded: with
	// that lane quarantined, its missing part is not a problem; without,
	// it is.
	a := events.BalanceRef{Scope: "org:acme", Period: events.PeriodMonth, Instance: "2026-11"}
	u := events.BalanceRef{Scope: "user:u-17", Period: events.PeriodDay, Instance: "2026-11-30"}
	c := streams.DefaultConfig()
	c.Lanes = 2
	layout, err := streams.New(c)
	require.NoError(t, err)
	require.NotEqual(t, layout.LaneKey(a), layout.LaneKey(u))
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	st := NewState()
	require.NoError(t, st.Apply(1, layout.LaneKey(a), laneJSON(t, events.BalanceRevision{
		Schema: events.SchemaBalance, Balance: a, Unit: "USD", Limit: events.MustMoney("10"),
		Reserved: events.MustMoney("1"), Open: 1,
		Events: events.Events{events.ReservationOpened{
			ReservationID: "r1", RequestID: "q1", Balance: a, Amount: events.MustMoney("1"), Unit: "USD",
			Balances: []events.BalanceRef{a, u}, ExpiresAt: at.Add(time.Minute), At: at,
		}},
	})))

	rep := &Report{}
	checkInvariants(rep, st, layout, map[string]bool{layout.LaneKey(u): true})
	require.Empty(t, rep.Problems)

	rep = &Report{}
	checkInvariants(rep, st, layout, map[string]bool{})
	require.Equal(t, []string{"reservation r1: lists balance " + u.String() + " but was never opened there"}, rep.Problems)

	// A quarantined lane leaves its balances out.
	rep = &Report{}
	checkInvariants(rep, st, layout, map[string]bool{layout.LaneKey(a): true, layout.LaneKey(u): true})
	require.Empty(t, rep.Problems)
}
