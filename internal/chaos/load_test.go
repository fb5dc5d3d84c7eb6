package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// Named bounds of the load.
const (
	// attemptTimeout bounds one request attempt; a caller retries the same
	// request after it.
	attemptTimeout = 2 * time.Second
	// deniedPause spaces a caller's admits after a denial, so a full
	// budget is not hammered.
	deniedPause = 10 * time.Millisecond
	// teams is the number of team budgets the callers share; each admit
	// names the org and one team.
	teams = 4
	// teamLimit is each team budget's limit: with amount 1 and three
	// callers per team, about one admit in three is denied limit_reached.
	teamLimit = "2"
)

// op is one caller operation and its answer.
type op struct {
	kind       string // admit, settle, release
	requestID  string // admit's request id
	resID      string // the reservation (admit's answer, or the one closed)
	caller     int
	sent, done time.Time
	attempts   int
	// uncertain: an earlier attempt got no definitive answer (a timeout,
	// ledger_unavailable or ledger_busy), so the request may have been
	// committed before this answer.
	uncertain bool
	// unresolved: the run ended before a definitive answer.
	unresolved bool
	admitted   bool
	status     string // settle or release: the status answered
	code       string // error code or denial reason; "" when it succeeded
	first      string // the first non-definitive answer, for the log
}

// stamp formats the instants of the kept log.
const stamp = "15:04:05.000000"

func (o *op) String() string {
	return fmt.Sprintf("%s %s %s caller=%d sent=%s done=%s attempts=%d first=%q code=%q admitted=%v status=%s unresolved=%v",
		o.kind, o.requestID, o.resID, o.caller, o.sent.Format(stamp), o.done.Format(stamp), o.attempts, o.first, o.code, o.admitted, o.status, o.unresolved)
}

// acked reports whether the operation was acknowledged as done: an admit
// admitted, a settle settled, a release released.
func (o *op) acked() bool {
	switch o.kind {
	case "admit":
		return o.admitted
	case "settle":
		return o.code == "" && o.status == events.StatusSettled
	default:
		return o.code == "" && o.status == events.StatusReleased
	}
}

// load is the callers and their log.
type load struct {
	layout streams.Layout
	conns  []*nats.Conn
	stop   chan struct{}
	wg     sync.WaitGroup

	mu  sync.Mutex
	ops []*op
	// acks are the instants of every definitive answer, for the outages.
	acks []time.Time
	seq  atomic.Int64
	// retryHeld counts the attempts of retried admits answered
	// ledger_unavailable because they would have been denied.
	retryHeld atomic.Int64
}

func newLoad(layout streams.Layout, conns []*nats.Conn) *load {
	return &load{layout: layout, conns: conns, stop: make(chan struct{})}
}

// start runs n callers: each admits 1 USD in org:acme and its team, then
// settles it (actual 0.5) or releases it, alternately, retrying every
// request under the same id until it has a definitive answer.
func (ld *load) start(n int) {
	for c := 0; c < n; c++ {
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			nc := ld.conns[c%len(ld.conns)]
			for k := 0; ; k++ {
				select {
				case <-ld.stop:
					return
				default:
				}
				id := ld.seq.Add(1)
				a := &op{kind: "admit", requestID: fmt.Sprintf("c%d-%d", c, id), caller: c}
				var ar events.AdmitReply
				if !ld.do(nc, a, streams.EndpointAdmit, events.AdmitRequest{RequestID: a.requestID,
					Scopes: []string{"org:acme", fmt.Sprintf("team:t%d", c%teams)}, Amount: "1", TTL: "10m"}, &ar) {
					return
				}
				if a.code == "" {
					a.admitted, a.resID = ar.Admitted, ar.ReservationID
					if ar.Denial != nil {
						a.code = string(ar.Denial.Reason)
					}
				}
				ld.record(a)
				if !a.admitted {
					select {
					case <-ld.stop:
						return
					case <-time.After(deniedPause):
					}
					continue
				}
				cl := &op{kind: "settle", requestID: a.requestID, resID: a.resID, caller: c}
				var cr events.CloseReply
				var ok bool
				if k%2 == 0 {
					ok = ld.do(nc, cl, streams.EndpointSettle, events.SettleRequest{ReservationID: a.resID, Actual: "0"}, &cr)
				} else {
					cl.kind = "release"
					ok = ld.do(nc, cl, streams.EndpointRelease, events.ReleaseRequest{ReservationID: a.resID}, &cr)
				}
				if cl.code == "" {
					cl.status = cr.Status
				}
				ld.record(cl)
				if !ok {
					return
				}
			}
		}()
	}
}

// do sends req until it has a definitive answer (decoded into out, or an
// error code in o.code), or the load stops with no definitive answer yet
// (o.unresolved). It reports false when the load stopped meanwhile; a
// caller stopped after an admit's answer still closes it (finish).
func (ld *load) do(nc *nats.Conn, o *op, endpoint string, req, out any) bool {
	data, _ := json.Marshal(req)
	o.sent = time.Now()
	for {
		o.attempts++
		if ar, ok := req.(events.AdmitRequest); ok && o.attempts == 2 {
			// The first attempt may still commit: say so (the service then
			// never denies this request, see events.AdmitRequest.Retry).
			ar.Retry = true
			data, _ = json.Marshal(ar)
		}
		msg, err := nc.Request(ld.layout.Endpoint(endpoint), data, attemptTimeout)
		if err == nil {
			var er events.ErrorReply
			if jerr := json.Unmarshal(msg.Data, &er); jerr != nil {
				o.code, o.done = "undecodable: "+jerr.Error(), time.Now()
				return true
			}
			if er.Error == nil {
				o.done = time.Now()
				if jerr := json.Unmarshal(msg.Data, out); jerr != nil {
					o.code = "undecodable: " + jerr.Error()
				}
				return true
			}
			if er.Error.Code != events.CodeLedgerUnavailable && er.Error.Code != events.CodeLedgerBusy {
				o.code, o.done = string(er.Error.Code), time.Now()
				return true
			}
			if strings.Contains(er.Error.Message, "this retry would be denied") {
				ld.retryHeld.Add(1)
			}
			err = errors.New(string(er.Error.Code) + ": " + er.Error.Message)
		}
		o.uncertain = true
		if o.first == "" {
			o.first = err.Error()
		}
		select {
		case <-ld.stop:
			if o.kind != "admit" && time.Since(o.sent) < drainBound {
				continue // a close in flight is finished while the cluster is whole
			}
			o.unresolved, o.done = true, time.Now()
			return false
		default:
		}
		if errors.Is(err, nats.ErrNoResponders) {
			// Answered at once: no replica subscribed right now. A pause,
			// so the caller does not spin.
			select {
			case <-ld.stop:
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

// drainBound bounds how long a settle or release still retries after the
// load stopped.
const drainBound = 30 * time.Second

func (ld *load) record(o *op) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	ld.ops = append(ld.ops, o)
	if !o.unresolved {
		ld.acks = append(ld.acks, o.done)
	}
}

// count returns how many operations have a definitive answer.
func (ld *load) count() int {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return len(ld.acks)
}

// finish stops the callers and waits for them.
func (ld *load) finish() {
	close(ld.stop)
	ld.wg.Wait()
}

// longestGap returns the longest interval between two consecutive
// definitive answers (or from from, or until until, with none) within
// [from, until]: how long no caller heard anything definitive.
func (ld *load) longestGap(from, until time.Time) time.Duration {
	ld.mu.Lock()
	var in []time.Time
	for _, a := range ld.acks {
		if !a.Before(from) && !a.After(until) {
			in = append(in, a)
		}
	}
	ld.mu.Unlock()
	sort.Slice(in, func(i, j int) bool { return in[i].Before(in[j]) })
	prev, worst := from, time.Duration(0)
	for _, a := range append(in, until) {
		if d := a.Sub(prev); d > worst {
			worst = d
		}
		prev = a
	}
	return worst
}
