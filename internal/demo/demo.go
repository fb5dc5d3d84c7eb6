package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/apd/v3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/embedded"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// The demo's named defaults and bounds. The headline defaults: 20
// concurrent $0.02 calls against a $0.10 ceiling, which a check-then-act
// ledger lets land 300% over and spendgate holds at 0% over, with 5
// admitted and 15 refused. Each of the four fail-open patterns runs with a
// $1.00 ceiling, $0.05 per call and 40 requests, of which 20 fit.
const (
	demoDefaultConcurrency = 20
	demoDefaultCeiling     = "0.10"
	demoDefaultPrice       = "0.02"
	// demoDefaultLatency is the fake upstream's time per call. That every
	// caller of a naive burst reads before any records does not depend on
	// it: demoNaive gates the calls of a burst on every read (see there).
	demoDefaultLatency = 10 * time.Millisecond
	demoMaxLatency     = 10 * time.Second
	demoMaxConcurrency = 10000

	demoPatternCeiling  = "1.00"
	demoPatternPrice    = "0.05"
	demoPatternRequests = 40
	// demoLongFactor is what a long completion costs, in short calls.
	demoLongFactor = 20
	// demoCheapCalls is how many short calls come before the long ones in
	// the post-hoc pattern: they leave $0.05 of headroom.
	demoCheapCalls = 19
	// Requests [demoOutageFrom, demoOutageTo) (zero-based) meet the ledger
	// outage of the best-effort pattern: requests 11 to 30.
	demoOutageFrom = 10
	demoOutageTo   = 30

	demoModel = "demo-model"
	// demoTokensPerUnit is how many output tokens one unit of a call is,
	// for spendgate's pricing table (prices per million tokens).
	demoTokensPerUnit = 1000
	demoNewModel      = "brand-new-model"
	demoUnit          = "USD"
	demoTTL           = "1m"
	// demoOutageTimeout and demoOutageAttempts bound the client of the
	// outage pattern, so that its fail-closed denials come quickly: with
	// more than one attempt the client waits out "no responders" (a
	// replica restarting) for the whole bound, a second per denied call
	// here. One attempt, generous, fails closed at once while no replica
	// serves.
	demoOutageTimeout  = 2 * time.Second
	demoOutageAttempts = 1
	demoTimeout        = 5 * time.Minute

	demoHeld     = "held"
	demoBreached = "BREACHED"
	// demoOverCeiling is the naive ledger's refusal reason.
	demoOverCeiling = "over_ceiling"
)

var (
	errDemoUnpriced  = errors.New("model has no price in the caller's pricing table")
	errDemoStoreDown = errors.New("ledger write timed out")
)

// Options configure Overrun. DefaultOptions returns the defaults.
type Options struct {
	// Concurrency is the number of concurrent priced calls in the headline
	// burst, 1..10000.
	Concurrency int
	// Ceiling is the headline budget's ceiling, a decimal string (USD) > 0.
	Ceiling string
	// Price is what one call costs, a decimal string (USD) > 0.
	Price string
	// Latency is how long the fake upstream takes per call, 0..10s.
	Latency time.Duration
	// Log receives the diagnostics of the demo's spendgate clients; nil is
	// slog.Default(). The warnings the outage pattern causes on purpose
	// are counted in its Side (ClientWarnings) instead.
	Log *slog.Logger
}

// DefaultOptions returns the headline defaults: 20 concurrent calls at
// $0.02 against a $0.10 ceiling, 10ms per call.
func DefaultOptions() Options {
	return Options{Concurrency: demoDefaultConcurrency, Ceiling: demoDefaultCeiling, Price: demoDefaultPrice, Latency: demoDefaultLatency}
}

// Validate checks the options and returns the first problem, in the words
// of the command's flags.
func (o Options) Validate() error {
	_, _, err := o.parse()
	return err
}

func (o Options) parse() (ceiling, price events.Money, err error) {
	if o.Concurrency < 1 || o.Concurrency > demoMaxConcurrency {
		return ceiling, price, fmt.Errorf("--concurrency %d out of range [1, %d]", o.Concurrency, demoMaxConcurrency)
	}
	if o.Latency < 0 || o.Latency > demoMaxLatency {
		return ceiling, price, fmt.Errorf("--latency %s out of range [0, %s]", o.Latency, demoMaxLatency)
	}
	if ceiling, err = demoPositive("--ceiling", o.Ceiling); err != nil {
		return ceiling, price, err
	}
	if price, err = demoPositive("--price", o.Price); err != nil {
		return ceiling, price, err
	}
	return ceiling, price, nil
}

// Overrun starts an embedded NATS server with JetStream (temp dir, random
// port), one spendgate replica and a fake priced upstream, runs the same
// burst of concurrent priced calls against a check-then-act ledger and
// through spendgate, then the four fail-open patterns, audits the book of
// record and stops everything. It returns an error for invalid options or
// when the demo cannot run; a breached ceiling is reported in the Report
// (Held, AuditOK), not as an error.
func Overrun(ctx context.Context, o Options) (*Report, error) {
	ceiling, price, err := o.parse()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	env, err := startDemoEnv(ctx, log)
	if err != nil {
		return nil, err
	}
	defer env.close()
	return env.run(ctx, o.Concurrency, ceiling, price, o.Latency)
}

func demoPositive(name, s string) (events.Money, error) {
	m, err := events.ParseMoney(s)
	if err != nil {
		return events.Zero, fmt.Errorf("%s: %w", name, err)
	}
	if m.Sign() <= 0 {
		return events.Zero, fmt.Errorf("%s must be greater than 0", name)
	}
	return m, nil
}

// Report is the whole demo's outcome, as printed and as JSON.
type Report struct {
	URL         string     `json:"nats_url"`
	Concurrency int        `json:"concurrency"`
	Latency     string     `json:"upstream_latency"`
	Headline    Scenario   `json:"headline"`
	Patterns    []Scenario `json:"patterns"`
	// Audit is the replay of the book of record against the live balances.
	Audit   string `json:"audit"`
	AuditOK bool   `json:"audit_ok"`
	// Held is true when spendgate held every ceiling.
	Held bool `json:"held"`
}

// Scenario is one scenario run against the naive ledger and through
// spendgate.
type Scenario struct {
	Name      string `json:"name"`
	Mechanism string `json:"mechanism"`
	Requests  int    `json:"requests"`
	Price     string `json:"price"`
	Naive     Side   `json:"naive"`
	Spendgate Side   `json:"spendgate"`
	// Verdict is spendgate's: held or BREACHED.
	Verdict string `json:"verdict"`
	Note    string `json:"note"`
}

// Side is one side of a scenario. Spent is what the upstream billed;
// Recorded is what the ledger believes was spent.
type Side struct {
	Spent       string         `json:"spent"`
	Recorded    string         `json:"recorded"`
	Ceiling     string         `json:"ceiling"`
	OverPercent string         `json:"over_percent"`
	Admitted    int            `json:"admitted"`
	Refused     int            `json:"refused"`
	RefusedBy   map[string]int `json:"refused_by,omitempty"`
	Breached    bool           `json:"breached"`
	// ClientWarnings counts the warnings spendgate's client logged while
	// the demo held the ledger down on purpose (the outage pattern: each
	// fail-closed admit's void finds no replica either). Expected, they
	// are counted here rather than printed.
	ClientWarnings int `json:"client_warnings,omitempty"`
}

// demoCall is one model call: its model, and the output units (max
// tokens) it asks for, all of which it produces.
type demoCall struct {
	model string
	units int64
}

// demoPricing prices calls. caller is the caller-side table: like every
// pricing table it lags model releases. provider is what the upstream
// bills. Both are per output unit (demoTokensPerUnit output tokens).
type demoPricing struct {
	caller   map[string]events.Money
	provider map[string]events.Money
}

// newDemoPricing prices demoModel at price per unit for both; the provider
// also serves demoNewModel at the same price, which the caller's table
// does not know yet.
func newDemoPricing(price events.Money) demoPricing {
	return demoPricing{
		caller:   map[string]events.Money{demoModel: price},
		provider: map[string]events.Money{demoModel: price, demoNewModel: price},
	}
}

// maxCost is the caller's priced maximum of c; errDemoUnpriced for a model
// its table does not know.
func (p demoPricing) maxCost(c demoCall) (events.Money, error) {
	rate, ok := p.caller[c.model]
	if !ok {
		return events.Zero, fmt.Errorf("%w: %s", errDemoUnpriced, c.model)
	}
	return demoTimes(rate, c.units)
}

// bill is what the upstream charges for c.
func (p demoPricing) bill(c demoCall) (events.Money, error) {
	rate, ok := p.provider[c.model]
	if !ok {
		return events.Zero, fmt.Errorf("the upstream does not serve %s", c.model)
	}
	return demoTimes(rate, c.units)
}

// demoTimes returns m × n exactly.
func demoTimes(m events.Money, n int64) (events.Money, error) {
	d, _, err := apd.NewFromString(m.String())
	if err != nil {
		return events.Zero, err
	}
	var r apd.Decimal
	if _, err := events.Context.Mul(&r, d, apd.New(n, 0)); err != nil {
		return events.Zero, err
	}
	return events.ParseMoney(r.Text('f'))
}

// demoPercentOver returns (spent - ceiling) / ceiling × 100 rounded to one
// decimal place, without trailing zeros; "0" when spent <= ceiling.
func demoPercentOver(spent, ceiling events.Money) (string, error) {
	over := spent.Sub(ceiling)
	if over.Sign() <= 0 {
		return "0", nil
	}
	num, _, err := apd.NewFromString(over.String())
	if err != nil {
		return "", err
	}
	den, _, err := apd.NewFromString(ceiling.String())
	if err != nil {
		return "", err
	}
	c := apd.BaseContext.WithPrecision(34)
	var q apd.Decimal
	if _, err := c.Quo(&q, num, den); err != nil {
		return "", err
	}
	if _, err := c.Mul(&q, &q, apd.New(100, 0)); err != nil {
		return "", err
	}
	if _, err := c.Quantize(&q, &q, -1); err != nil {
		return "", err
	}
	q.Reduce(&q)
	return q.Text('f'), nil
}

// demoUSD formats m with at least two decimal places: "$0.40".
func demoUSD(m events.Money) string { return "$" + demoUSDString(m.String()) }

func demoUSDString(s string) string {
	whole, frac, _ := strings.Cut(s, ".")
	for len(frac) < 2 {
		frac += "0"
	}
	return whole + "." + frac
}

// demoUpstream is the fake priced model: every call takes latency and
// bills its provider price.
type demoUpstream struct {
	latency time.Duration
	pricing demoPricing

	mu     sync.Mutex
	billed events.Money
}

func (u *demoUpstream) call(ctx context.Context, c demoCall) (events.Money, error) {
	cost, err := u.pricing.bill(c)
	if err != nil {
		return events.Zero, err
	}
	t := time.NewTimer(u.latency)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return events.Zero, ctx.Err()
	case <-t.C:
	}
	u.mu.Lock()
	u.billed = u.billed.Add(cost)
	u.mu.Unlock()
	return cost, nil
}

func (u *demoUpstream) total() events.Money {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.billed
}

// demoNaiveLedger is the check-then-act ledger, with its race on purpose:
// the mutex guards each read and each write, never the read-compare-call-
// record sequence. down makes writes fail, as a storage outage does.
type demoNaiveLedger struct {
	mu       sync.Mutex
	recorded events.Money
	down     bool
}

func (l *demoNaiveLedger) read() events.Money {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.recorded
}

func (l *demoNaiveLedger) write(m events.Money) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return errDemoStoreDown
	}
	l.recorded = l.recorded.Add(m)
	return nil
}

func (l *demoNaiveLedger) setDown(down bool) {
	l.mu.Lock()
	l.down = down
	l.mu.Unlock()
}

// demoTally counts admissions and refusals by reason.
type demoTally struct {
	mu       sync.Mutex
	admitted int
	refused  map[string]int
}

func (t *demoTally) admit() {
	t.mu.Lock()
	t.admitted++
	t.mu.Unlock()
}

func (t *demoTally) refuse(reason string) {
	t.mu.Lock()
	if t.refused == nil {
		t.refused = map[string]int{}
	}
	t.refused[reason]++
	t.mu.Unlock()
}

// side builds a Side; the tally must be quiescent.
func (t *demoTally) side(spent, recorded, ceiling events.Money) (Side, error) {
	over, err := demoPercentOver(spent, ceiling)
	if err != nil {
		return Side{}, err
	}
	s := Side{
		Spent: spent.String(), Recorded: recorded.String(), Ceiling: ceiling.String(), OverPercent: over,
		Admitted: t.admitted, Breached: spent.Cmp(ceiling) > 0,
	}
	for reason, n := range t.refused {
		if s.RefusedBy == nil {
			s.RefusedBy = map[string]int{}
		}
		s.RefusedBy[reason] = n
		s.Refused += n
	}
	return s, nil
}

// demoSpec is one scenario: the same calls against the naive ledger and
// through spendgate.
type demoSpec struct {
	name, slug, mechanism string
	ceiling, price        events.Money
	calls                 []demoCall
	// concurrent sends every call at once (after a common start);
	// otherwise one after the other.
	concurrent bool
	// postHoc: the naive side does not check before the call; it records
	// the billed cost after it and stops once the total reaches the ceiling.
	postHoc bool
	// outage: requests [demoOutageFrom, demoOutageTo) meet a ledger outage.
	outage bool
	// priced: spendgate's side prices each call from spendgate's own
	// pricing table (the admit names the model and its maximum output
	// tokens) instead of the caller's.
	priced bool
	// note explains the outcome, given both sides.
	note func(naive, sg Side) string
}

// demoEnv is the demo's embedded server, spendgate replica and client.
type demoEnv struct {
	log       *slog.Logger
	dir       string
	srv       *embedded.Server
	layout    streams.Layout
	nc        *nats.Conn // the callers' connection
	js        jetstream.JetStream
	c         *client.Client
	replica   *replica.Replica
	replicaNC *nats.Conn
}

func startDemoEnv(ctx context.Context, log *slog.Logger) (_ *demoEnv, err error) {
	e := &demoEnv{layout: streams.Default(), log: log}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.dir, err = os.MkdirTemp("", "spendgate-demo-"); err != nil {
		return nil, err
	}
	if e.srv, err = embedded.Start(e.dir); err != nil {
		return nil, err
	}
	if err = e.startReplica(ctx); err != nil {
		return nil, err
	}
	if e.nc, err = nats.Connect(e.srv.ClientURL(), nats.Name("spendgate-demo-callers")); err != nil {
		return nil, err
	}
	if e.js, err = jetstream.New(e.nc); err != nil {
		return nil, err
	}
	if e.c, err = client.New(e.nc, client.WithLogger(log)); err != nil {
		return nil, err
	}
	return e, nil
}

// startReplica starts a spendgate replica on its own connection, as a
// separate process would be.
func (e *demoEnv) startReplica(ctx context.Context) error {
	nc, err := nats.Connect(e.srv.ClientURL(), nats.Name("spendgate-demo-replica"))
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return err
	}
	r, err := replica.Start(ctx, nc, js, replica.Config{Layout: e.layout, SweepInterval: -1})
	if err != nil {
		nc.Close()
		return fmt.Errorf("start the spendgate replica: %w", err)
	}
	e.replica, e.replicaNC = r, nc
	return nil
}

// stopReplica stops the replica: nothing answers spendgate requests until
// startReplica.
func (e *demoEnv) stopReplica() error {
	if e.replica == nil {
		return nil
	}
	err := e.replica.Stop()
	e.replicaNC.Close()
	e.replica, e.replicaNC = nil, nil
	return err
}

func (e *demoEnv) close() {
	_ = e.stopReplica()
	if e.nc != nil {
		e.nc.Close()
	}
	if e.srv != nil {
		e.srv.Shutdown()
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}

func (e *demoEnv) run(ctx context.Context, concurrency int, ceiling, price events.Money, latency time.Duration) (*Report, error) {
	rep := &Report{URL: e.srv.ClientURL(), Concurrency: concurrency, Latency: latency.String(), Held: true}
	specs, err := demoSpecs(concurrency, ceiling, price)
	if err != nil {
		return nil, err
	}
	for i, spec := range specs {
		sc, err := e.runSpec(ctx, spec, latency)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", spec.name, err)
		}
		if sc.Spendgate.Breached {
			rep.Held = false
		}
		if i == 0 {
			rep.Headline = sc
		} else {
			rep.Patterns = append(rep.Patterns, sc)
		}
	}
	audit, err := projector.Check(ctx, e.js, e.layout)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	rep.Audit, rep.AuditOK = audit.String(), audit.OK()
	return rep, nil
}

func demoSpecs(concurrency int, ceiling, price events.Money) ([]demoSpec, error) {
	pCeiling, pPrice := events.MustMoney(demoPatternCeiling), events.MustMoney(demoPatternPrice)
	short := demoCall{model: demoModel, units: 1}
	same := func(n int, c demoCall) []demoCall {
		out := make([]demoCall, n)
		for i := range out {
			out[i] = c
		}
		return out
	}
	postHoc := same(demoPatternRequests, demoCall{model: demoModel, units: demoLongFactor})
	for i := range demoCheapCalls {
		postHoc[i] = short
	}
	unpriced := same(demoPatternRequests, short)
	for i := 1; i < len(unpriced); i += 2 {
		unpriced[i] = demoCall{model: demoNewModel, units: 1}
	}
	longCost, err := demoTimes(pPrice, demoLongFactor)
	if err != nil {
		return nil, err
	}
	cheapCost, err := demoTimes(pPrice, demoCheapCalls)
	if err != nil {
		return nil, err
	}
	headroom := pCeiling.Sub(cheapCost)
	return []demoSpec{{
		name: "headline burst", slug: "headline",
		mechanism: "read the total, compare, call upstream, then record the cost",
		ceiling:   ceiling, price: price, calls: same(concurrency, short), concurrent: true,
	}, {
		name: "check-then-act", slug: "check-then-act",
		mechanism: "read the total, compare, call upstream, then record the cost",
		ceiling:   pCeiling, price: pPrice, calls: same(demoPatternRequests, short), concurrent: true,
		note: func(n, s Side) string {
			return fmt.Sprintf("%d concurrent requests all read the total before any recorded, and %d passed. "+
				"spendgate reserves atomically before the call: %d admitted, refused %s.",
				demoPatternRequests, n.Admitted, s.Admitted, demoReasons(s.RefusedBy))
		},
	}, {
		name: "post-hoc accounting", slug: "post-hoc",
		mechanism: "no check before the call; record the cost after it; stop once over",
		ceiling:   pCeiling, price: pPrice, calls: postHoc, postHoc: true,
		note: func(n, s Side) string {
			return fmt.Sprintf("one after the other: %d short calls leave %s of headroom, then a long completion "+
				"costing %s lands before anyone knows its cost. spendgate reserves the priced maximum "+
				"(max tokens) before the call: the long completion's %s does not fit, refused %s.",
				demoCheapCalls, demoUSD(headroom), demoUSD(longCost), demoUSD(longCost), demoReasons(s.RefusedBy))
		},
	}, {
		name: "best-effort recording", slug: "best-effort",
		mechanism: "the ledger write fails; the error is ignored and the call proceeds",
		ceiling:   pCeiling, price: pPrice, calls: same(demoPatternRequests, short), outage: true,
		note: func(n, s Side) string {
			return fmt.Sprintf("the naive ledger's writes timed out for requests %d-%d and were ignored: it recorded %s "+
				"while the upstream billed %s. spendgate's replica was stopped for the same requests and its "+
				"client failed closed: refused %s, never admitted unrecorded.%s",
				demoOutageFrom+1, demoOutageTo, demoUSD(events.MustMoney(n.Recorded)), demoUSD(events.MustMoney(n.Spent)),
				demoReasons(s.RefusedBy), demoWarnings(s.ClientWarnings))
		},
	}, {
		name: "unpriced model at zero", slug: "unpriced",
		mechanism: "a model missing from the pricing table is costed at 0",
		ceiling:   pCeiling, price: pPrice, calls: unpriced, priced: true,
		note: func(n, s Side) string {
			return fmt.Sprintf("every other request uses %s, which the upstream bills at %s. The caller's pricing table "+
				"has no price for it yet, so it costs it at 0, and the naive ledger admits it for free (recorded %s, billed %s). "+
				"spendgate prices each admit from its own pricing table (spendgate pricing put), which has no price for %s "+
				"either, and never costs a model at zero, so the call is never made: refused %s.",
				demoNewModel, demoUSD(pPrice), demoUSD(events.MustMoney(n.Recorded)),
				demoUSD(events.MustMoney(n.Spent)), demoNewModel, demoReasons(s.RefusedBy))
		},
	}}, nil
}

// demoWarnings says what the client's expected warnings were, if any.
func demoWarnings(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" The client's %d warnings (each admit's void found no replica either) were expected here and are not printed.", n)
}

// demoReasons formats refusal counts: "limit_reached 20".
func demoReasons(by map[string]int) string {
	if len(by) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, by[k])
	}
	return strings.Join(parts, ", ")
}

// demoDrive runs step for every call: all at once after a common start, or
// one after the other with before(i) ahead of each. It returns the first
// error.
func demoDrive(n int, concurrent bool, before, step func(i int) error) error {
	if !concurrent {
		for i := range n {
			if err := before(i); err != nil {
				return err
			}
			if err := step(i); err != nil {
				return err
			}
		}
		return nil
	}
	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = step(i)
		})
	}
	close(start)
	wg.Wait()
	return errors.Join(errs...)
}

func (e *demoEnv) runSpec(ctx context.Context, spec demoSpec, latency time.Duration) (Scenario, error) {
	pricing := newDemoPricing(spec.price)
	sc := Scenario{Name: spec.name, Mechanism: spec.mechanism, Requests: len(spec.calls), Price: spec.price.String()}

	// The naive ledger.
	var err error
	sc.Naive, err = demoNaive(ctx, spec, pricing, latency)
	if err != nil {
		return sc, err
	}
	// spendgate.
	sc.Spendgate, err = e.spendgate(ctx, spec, pricing, latency)
	if err != nil {
		return sc, err
	}
	sc.Verdict = demoHeld
	if sc.Spendgate.Breached {
		sc.Verdict = demoBreached
	}
	if spec.note != nil {
		sc.Note = spec.note(sc.Naive, sc.Spendgate)
	}
	return sc, nil
}

func demoNaive(ctx context.Context, spec demoSpec, pricing demoPricing, latency time.Duration) (Side, error) {
	l := &demoNaiveLedger{}
	up := &demoUpstream{latency: latency, pricing: pricing}
	var t demoTally
	before := func(i int) error {
		if spec.outage {
			l.setDown(i >= demoOutageFrom && i < demoOutageTo)
		}
		return nil
	}
	// A concurrent burst is modelled as it happens against a model that
	// answers in seconds: every caller's read lands before any call
	// returns. The gate makes that exact, where a timer would make the
	// naive side's numbers a matter of scheduling luck.
	var reads atomic.Int64
	allRead := make(chan struct{})
	read := func() events.Money {
		m := l.read()
		if spec.concurrent && reads.Add(1) == int64(len(spec.calls)) {
			close(allRead)
		}
		return m
	}
	call := func(c demoCall) (events.Money, error) {
		if spec.concurrent {
			select {
			case <-allRead:
			case <-ctx.Done():
				return events.Zero, ctx.Err()
			}
		}
		return up.call(ctx, c)
	}
	step := func(i int) error {
		c := spec.calls[i]
		if spec.postHoc {
			// No check before the call: its cost is known only after it.
			// The only brake is "stop once the total reaches the ceiling".
			if read().Cmp(spec.ceiling) >= 0 {
				t.refuse(demoOverCeiling)
				return nil
			}
			cost, err := call(c)
			if err != nil {
				return err
			}
			_ = l.write(cost)
			t.admit()
			return nil
		}
		price, err := pricing.maxCost(c)
		if err != nil {
			price = events.Zero // the fallback that fails open: an unpriced model costs nothing
		}
		if read().Add(price).Cmp(spec.ceiling) > 0 { // check...
			t.refuse(demoOverCeiling)
			return nil
		}
		if _, err := call(c); err != nil { // ...then act
			return err
		}
		// Best effort: "don't fail the user's request over telemetry".
		_ = l.write(price)
		t.admit()
		return nil
	}
	if err := demoDrive(len(spec.calls), spec.concurrent, before, step); err != nil {
		return Side{}, err
	}
	return t.side(up.total(), l.read(), spec.ceiling)
}

func (e *demoEnv) spendgate(ctx context.Context, spec demoSpec, pricing demoPricing, latency time.Duration) (Side, error) {
	scope := "demo:" + spec.slug
	if _, err := e.c.PutBudget(ctx, events.BudgetPutRequest{
		Scope: scope, Period: string(events.PeriodLifetime), Limit: spec.ceiling.String(), Unit: demoUnit,
	}); err != nil {
		return Side{}, fmt.Errorf("budget put %s: %w", scope, err)
	}
	if spec.priced {
		// The same prices as the caller's table, and the same gap: the
		// new model is not in it.
		out, err := demoTimes(spec.price, 1_000_000/demoTokensPerUnit)
		if err != nil {
			return Side{}, err
		}
		if _, err := e.c.PutPrice(ctx, events.PricingPutRequest{Model: demoModel, Input: "0", Output: out.String(), Unit: demoUnit}); err != nil {
			return Side{}, fmt.Errorf("pricing put %s: %w", demoModel, err)
		}
	}
	c := e.c
	// During the outage the client's warnings (its voids fail too) are
	// the expected consequence of the replica the demo stopped.
	var down atomic.Bool
	var warned atomic.Int64
	if spec.outage {
		var err error
		log := slog.New(expectedWarnings{next: e.log.Handler(), during: &down, n: &warned})
		if c, err = client.New(e.nc, client.WithTimeout(demoOutageTimeout), client.WithRetries(demoOutageAttempts), client.WithLogger(log)); err != nil {
			return Side{}, err
		}
	}
	up := &demoUpstream{latency: latency, pricing: pricing}
	var t demoTally
	before := func(i int) error {
		if !spec.outage {
			return nil
		}
		switch i {
		case demoOutageFrom:
			down.Store(true)
			return e.stopReplica()
		case demoOutageTo:
			down.Store(false)
			return e.startReplica(ctx)
		}
		return nil
	}
	step := func(i int) error {
		call := spec.calls[i]
		req := events.AdmitRequest{Scopes: []string{scope}, Unit: demoUnit, TTL: demoTTL,
			Metadata: map[string]string{"model": call.model}}
		if spec.priced {
			req.Model, req.MaxOutputTokens = call.model, call.units*demoTokensPerUnit
		} else {
			amount, err := pricing.maxCost(call)
			if err != nil {
				// The same caller as the naive one: it costs an unpriced
				// model at 0. The ledger refuses such an admit.
				amount = events.Zero
			}
			req.Amount = amount.String()
		}
		called := false
		err := client.Do(ctx, c, req, func(ctx context.Context) (string, error) {
			called = true
			cost, err := up.call(ctx, call)
			return cost.String(), err
		})
		var de *client.DeniedError
		var ee *events.Error
		switch {
		case err == nil:
			t.admit()
		case called: // admitted, but the call or its settle failed
			return err
		case errors.As(err, &de):
			t.refuse(string(de.Denial.Reason))
		case errors.As(err, &ee) && ee.Code == events.CodeInvalidAmount:
			t.refuse(string(ee.Code))
		default:
			return err
		}
		return nil
	}
	err := demoDrive(len(spec.calls), spec.concurrent, before, step)
	down.Store(false)
	if spec.outage && e.replica == nil {
		if serr := e.startReplica(ctx); err == nil {
			err = serr
		}
	}
	if err != nil {
		return Side{}, err
	}
	v, err := e.c.GetBudget(ctx, events.BudgetGetRequest{Scope: scope, Period: string(events.PeriodLifetime)})
	if err != nil {
		return Side{}, fmt.Errorf("budget get %s: %w", scope, err)
	}
	recorded, err := events.ParseMoney(v.Spent)
	if err != nil {
		return Side{}, fmt.Errorf("budget get %s: spent: %w", scope, err)
	}
	billed := up.total()
	if recorded.Cmp(billed) != 0 || v.Reserved != "0" || v.Open != 0 {
		return Side{}, fmt.Errorf("the ledger disagrees with the upstream: it recorded %s spent (%s reserved, %d open), the upstream billed %s",
			v.Spent, v.Reserved, v.Open, billed)
	}
	side, err := t.side(billed, recorded, spec.ceiling)
	side.ClientWarnings = int(warned.Load())
	return side, err
}

// expectedWarnings is the slog.Handler of the outage pattern's client:
// while during is set (the demo holds the ledger down) it counts the
// client's warnings in n instead of passing them on; every other record
// goes to next, so a warning outside the outage still shows.
type expectedWarnings struct {
	next   slog.Handler
	during *atomic.Bool
	n      *atomic.Int64
}

func (h expectedWarnings) expected(l slog.Level) bool { return l == slog.LevelWarn && h.during.Load() }

func (h expectedWarnings) Enabled(ctx context.Context, l slog.Level) bool {
	return h.expected(l) || h.next.Enabled(ctx, l)
}

func (h expectedWarnings) Handle(ctx context.Context, r slog.Record) error {
	if h.expected(r.Level) {
		h.n.Add(1)
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h expectedWarnings) WithAttrs(as []slog.Attr) slog.Handler {
	h.next = h.next.WithAttrs(as)
	return h
}

func (h expectedWarnings) WithGroup(name string) slog.Handler {
	h.next = h.next.WithGroup(name)
	return h
}

// Print writes the report as text and returns the first write error.
func (r *Report) Print(w io.Writer) error {
	ew := &errWriter{w: w}
	r.print(ew)
	return ew.err
}

// errWriter remembers the first write error; every later write fails
// with it.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	if err != nil {
		e.err = err
	}
	return n, err
}

// print writes the report as text.
func (r *Report) print(w io.Writer) {
	h := r.Headline
	fmt.Fprintf(w, "spendgate demo overrun: %d concurrent calls at %s each against a %s ceiling\n",
		h.Requests, demoUSD(events.MustMoney(h.Price)), demoUSD(events.MustMoney(h.Naive.Ceiling)))
	fmt.Fprintf(w, "(embedded NATS with JetStream at %s, one spendgate replica, a fake upstream taking %s per call)\n\n",
		r.URL, r.Latency)
	fmt.Fprintf(w, "  check-then-act ledger: %s\n", demoHeadlineLine(h.Naive, "failed open"))
	fmt.Fprintf(w, "  spendgate:             %s\n", demoHeadlineLine(h.Spendgate, demoBreached))
	fmt.Fprintf(w, "\nFour ways a ledger fails open, each with a $%s ceiling, $%s per call and %d requests (%d should be permitted):\n\n",
		demoUSDString(demoPatternCeiling), demoUSDString(demoPatternPrice), demoPatternRequests, demoPatternRequests/2)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "pattern\tnaive spent/ceiling\tover\tadmitted\t|\tspendgate spent/ceiling\tover\tadmitted\trefused\tverdict")
	for _, p := range r.Patterns {
		fmt.Fprintf(tw, "%s\t%s\t%s%%\t%d\t|\t%s\t%s%%\t%d\t%d\t%s\n", p.Name,
			demoSpentCeiling(p.Naive), p.Naive.OverPercent, p.Naive.Admitted,
			demoSpentCeiling(p.Spendgate), p.Spendgate.OverPercent, p.Spendgate.Admitted, p.Spendgate.Refused, p.Verdict)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	for _, p := range r.Patterns {
		fmt.Fprintf(w, "  %s: %s\n", p.Name, p.Note)
	}
	fmt.Fprintf(w, "\nbook of record: %s\n", r.Audit)
	naiveOpen := 0
	for _, p := range r.Patterns {
		if p.Naive.Breached {
			naiveOpen++
		}
	}
	if r.Held {
		fmt.Fprintf(w, "spendgate held every ceiling; the naive ledger failed open in %d of %d patterns.\n", naiveOpen, len(r.Patterns))
	} else {
		fmt.Fprintln(w, "CEILING BREACHED: spendgate let spend past a ceiling (see the rows above).")
	}
}

// demoHeadlineLine formats one side of the headline; breached is appended
// when it spent past the ceiling.
func demoHeadlineLine(s Side, breached string) string {
	line := fmt.Sprintf("%s spent against a %s ceiling: %s%% over (%d admitted / %d refused)",
		demoUSD(events.MustMoney(s.Spent)), demoUSD(events.MustMoney(s.Ceiling)), s.OverPercent, s.Admitted, s.Refused)
	if s.Breached {
		line += ": " + breached
	}
	return line
}

func demoSpentCeiling(s Side) string {
	return demoUSD(events.MustMoney(s.Spent)) + " / " + demoUSD(events.MustMoney(s.Ceiling))
}
