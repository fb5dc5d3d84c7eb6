package ledger

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/learn"
	"github.com/spendgate/spendgate/streams"
)

// recorder is an applyEvent target that records what the rules ask of
// it, holding the reservations it is given.
type recorder struct {
	calls []string
	res   map[string]*Reservation // held
	win   map[string]*Reservation // stamped
}

func (r *recorder) log(f string, a ...any) { r.calls = append(r.calls, fmt.Sprintf(f, a...)) }

func (r *recorder) reserve(k string, m, x events.Money) {
	if x.IsZero() {
		r.log("reserve %s", m)
	} else {
		r.log("reserve %s exposure %s", m, x)
	}
}
func (r *recorder) unreserve(k string, m, x events.Money) {
	if x.IsZero() {
		r.log("unreserve %s", m)
	} else {
		r.log("unreserve %s exposure %s", m, x)
	}
}
func (r *recorder) learn(k learn.Key, a events.Money)         { r.log("learn %s %s %s", k.Scope, k.Model, a) }
func (r *recorder) spend(k string, a, o events.Money)         { r.log("spend %s overrun %s", a, o) }
func (r *recorder) alert(k string, e events.ThresholdCrossed) { r.log("alert %s", e.Threshold) }
func (r *recorder) held(id string) *Reservation               { return r.res[id] }
func (r *recorder) stamped(id string) *Reservation            { return r.win[id] }
func (r *recorder) opens(k string, res *Reservation)          { r.log("opens %s", res.ID) }
func (r *recorder) closes(k, id string)                       { r.log("closes %s", id) }
func (r *recorder) void(e events.RequestVoided)               { r.log("void %s", e.RequestID) }
func (r *recorder) openChanged(res *Reservation, d int)       { r.log("tenant open %s %+d", res.ID, d) }
func (r *recorder) closed(res *Reservation, again bool) {
	r.log("closed %s %s again=%v", res.ID, res.Status, again)
}
func (r *recorder) opened(e events.ReservationOpened) *Reservation {
	r.log("opened %s", e.ReservationID)
	res := &Reservation{ID: e.ReservationID, Status: events.StatusOpen}
	r.res[e.ReservationID] = res
	return res
}

// TestApplyEvent pins the ledger's one rule set, which both the group's
// overlay and the book apply: a change of any rule fails one of these.
func TestApplyEvent(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	bal := events.BalanceRef{Scope: "team:a", Period: events.PeriodMonth, Instance: "2026-12"}
	m := events.MustMoney
	opened := events.ReservationOpened{ReservationID: "r", RequestID: "q", Balance: bal, Balances: []events.BalanceRef{bal}, Unit: "USD", Amount: m("0.5"), At: at}
	withCeiling := opened
	ceiling := m("0.8")
	withCeiling.Ceiling = &ceiling
	for name, tc := range map[string]struct {
		held, stamped map[string]string // id -> status
		e             events.Event
		want          []string
		status        string // of r after
	}{
		"open": {e: opened, want: []string{"reserve 0.5", "opened r", "tenant open r +1", "opens r"}, status: events.StatusOpen},
		"settle": {held: map[string]string{"r": events.StatusOpen},
			e:    events.ReservationSettled{ReservationID: "r", Balance: bal, Reserved: m("0.5"), Actual: m("0.7"), Overrun: m("0.2")},
			want: []string{"spend 0.7 overrun 0.2", "unreserve 0.5", "closes r", "tenant open r -1", "closed r settled again=false"}, status: events.StatusSettled},
		"settle after expiry takes it from the window and releases nothing": {stamped: map[string]string{"r": events.StatusExpired},
			e:    events.ReservationSettled{ReservationID: "r", Balance: bal, Reserved: m("0.5"), Actual: m("0.1"), Overrun: m("0"), AfterExpiry: true, Late: true},
			want: []string{"spend 0.1 overrun 0", "closed r settled again=false"}, status: events.StatusSettled},
		"settle of another balance of a settled reservation": {held: map[string]string{"r": events.StatusSettled},
			e:    events.ReservationSettled{ReservationID: "r", Balance: bal, Reserved: m("0.5"), Actual: m("0.5"), Overrun: m("0")},
			want: []string{"spend 0.5 overrun 0", "unreserve 0.5", "closes r", "closed r settled again=true"}, status: events.StatusSettled},
		"expire": {held: map[string]string{"r": events.StatusOpen},
			e:    events.ReservationReleased{ReservationID: "r", Balance: bal, Reserved: m("0.5"), Reason: events.ReasonExpired},
			want: []string{"unreserve 0.5", "closes r", "tenant open r -1", "closed r expired again=false"}, status: events.StatusExpired},
		"release of another balance of a released reservation": {held: map[string]string{"r": events.StatusReleased},
			e:    events.ReservationReleased{ReservationID: "r", Balance: bal, Reserved: m("0.5"), Reason: events.ReasonVoided},
			want: []string{"unreserve 0.5", "closes r", "closed r released again=true"}, status: events.StatusReleased},
		"release of a reservation not held changes only the balance": {
			e:    events.ReservationReleased{ReservationID: "r", Balance: bal, Reserved: m("0.5")},
			want: []string{"unreserve 0.5", "closes r"}},
		"open with a ceiling adds to exposure": {e: withCeiling, want: []string{"reserve 0.5 exposure 0.3", "opened r", "tenant open r +1", "opens r"}, status: events.StatusOpen},
		"threshold":                            {e: events.ThresholdCrossed{Balance: bal, Threshold: m("0.8")}, want: []string{"alert 0.8"}},
		"void":                                 {e: events.RequestVoided{RequestID: "q", Balance: bal}, want: []string{"void q"}},
	} {
		t.Run(name, func(t *testing.T) {
			rec := &recorder{res: map[string]*Reservation{}, win: map[string]*Reservation{}}
			for id, st := range tc.held {
				rec.res[id] = &Reservation{ID: id, Status: st}
			}
			for id, st := range tc.stamped {
				rec.win[id] = &Reservation{ID: id, Status: st}
			}
			applyEvent(rec, "k", tc.e)
			require.Equal(t, tc.want, rec.calls, strings.Join(rec.calls, "; "))
			if tc.status != "" {
				r := rec.res["r"]
				if r == nil {
					r = rec.win["r"]
				}
				require.Equal(t, tc.status, r.Status)
			}
		})
	}
}

// TestApplyEvent_Learned: a settle of a part with a ceiling (admitted
// under a learn rule) and a price quote takes its exposure out and teaches
// its scope and model the cost the caller reported, excess included; a
// release takes the exposure out and teaches nothing; a part without a
// ceiling teaches nothing.
func TestApplyEvent_Learned(t *testing.T) {
	m := events.MustMoney
	bal := events.BalanceRef{Scope: "team:a", Period: events.PeriodMonth, Instance: "2026-12"}
	key := streams.BalanceKey(bal)
	ceiling := m("0.8")
	mk := func(ceil *events.Money) *recorder {
		return &recorder{res: map[string]*Reservation{"r": {ID: "r", Status: events.StatusOpen, Balances: []events.BalanceRef{bal},
			Parts: []Part{{Key: key, Unit: "USD", Amount: m("0.5"), Ceiling: ceil}}, Pricing: &events.PriceQuote{Model: "gpt-x"}}}}
	}
	excess := m("0.1")
	rec := mk(&ceiling)
	applyEvent(rec, key, events.ReservationSettled{ReservationID: "r", Balance: bal, Reserved: m("0.5"), Actual: m("0.8"), Overrun: m("0.3"), Excess: &excess})
	require.Equal(t, []string{"spend 0.8 overrun 0.3", "unreserve 0.5 exposure 0.3", "closes r", "learn team:a gpt-x 0.9", "tenant open r -1", "closed r settled again=false"}, rec.calls)

	rec = mk(&ceiling)
	applyEvent(rec, key, events.ReservationReleased{ReservationID: "r", Balance: bal, Reserved: m("0.5"), Reason: events.ReasonReleased})
	require.Equal(t, []string{"unreserve 0.5 exposure 0.3", "closes r", "tenant open r -1", "closed r released again=false"}, rec.calls)

	rec = mk(nil)
	applyEvent(rec, key, events.ReservationSettled{ReservationID: "r", Balance: bal, Reserved: m("0.5"), Actual: m("0.2"), Overrun: m("0")})
	require.Equal(t, []string{"spend 0.2 overrun 0", "unreserve 0.5", "closes r", "tenant open r -1", "closed r settled again=false"}, rec.calls)
}
