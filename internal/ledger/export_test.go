package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gate"
	"github.com/spendgate/spendgate/streams"
)

// BookBody returns the encoded state of l's book at an instant it is exact
// (what a snapshot's body would hold), and its sequence.
func BookBody(ctx context.Context, l *Ledger) ([]byte, uint64, error) {
	st, _, err := l.dumpExact(ctx, SnapshotVersion)
	if err != nil {
		return nil, 0, err
	}
	b, err := json.Marshal(st)
	return b, st.Seq, err
}

// SnapshotVersions returns l's snapshot encoded in version 2 and in
// version 3, both of the book at seq (l must be idle: no writes between
// the two dumps), and its object name.
func SnapshotVersions(ctx context.Context, l *Ledger) (name string, v2, v3 []byte, err error) {
	var seq uint64
	for _, v := range []int{2, 3} {
		st, _, err := l.dumpExact(ctx, v)
		if err != nil {
			return "", nil, nil, err
		}
		if seq != 0 && st.Seq != seq {
			return "", nil, nil, fmt.Errorf("the book moved from %d to %d", seq, st.Seq)
		}
		seq = st.Seq
		data, err := encodeSnapshot(st, "", nil)
		if err != nil {
			return "", nil, nil, err
		}
		if v == 2 {
			v2 = data
		} else {
			v3 = data
		}
	}
	return streams.SnapshotName(seq), v2, v3, nil
}

// FoldView folds the stream's revisions 1..seq into a fresh book (the way
// the follower does, message by message, stamping closes with each
// message's server time) and returns its BookView.
func FoldView(ctx context.Context, js jetstream.JetStream, layout streams.Layout, seq uint64, opts ...Option) (string, error) {
	l, err := New(ctx, nil, js, layout, opts...)
	if err != nil {
		return "", err
	}
	for s := uint64(1); s <= seq; s++ {
		m, err := l.stream.GetMsg(ctx, s)
		if err != nil {
			return "", fmt.Errorf("seq %d: %w", s, err)
		}
		l.fold(&gate.Message{Seq: s, Subject: m.Subject, Header: m.Header, Data: m.Data, At: m.Time}, true)
		l.bk.forgetUntil(s, m.Time)
	}
	return bookView(l.bk), nil
}

// SnapshotView reads a stored snapshot, checks it, loads it into a book
// as a starting replica would, and returns its BookView.
func SnapshotView(ctx context.Context, js jetstream.JetStream, layout streams.Layout, name string, opts ...Option) (string, error) {
	l, err := New(ctx, nil, js, layout, opts...)
	if err != nil {
		return "", err
	}
	store, err := js.ObjectStore(ctx, layout.SnapshotBucket())
	if err != nil {
		return "", err
	}
	b, _, err := l.readSnapshot(ctx, store, name)
	if err != nil {
		return "", err
	}
	return bookView(b), nil
}

// BookView renders every field of l's book, independently of the snapshot
// code (which a test of snapshots must not trust to compare books): what
// the book would answer to anyone, plus its queues, stamps and indexes.
func BookView(l *Ledger) string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return bookView(l.bk)
}

func bookView(b *book) string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	hash := func(k string) string { _, h := b.valid(k); return h }
	for k, d := range b.budgets {
		add("budget %s rev=%d def=%+v src=%+v hash=%s", k, d.rev, d.def, d.src, hash(k))
	}
	b.heads.Each(func(k string, hd gate.Head) {
		if streams.IsLaneKey(k) && hd.Valid > 0 {
			add("lane %s rev=%d hash=%s", k, hd.Valid, hd.Hash)
		}
		if hd.Seen > hd.Valid {
			add("skipped %s rev=%d", k, hd.Seen)
		}
	})
	if b.trust != nil {
		add("trust rev=%d hash=%s %s", b.trust.Seq, b.trust.Hash, mustJSON(b.trust.Trust))
	}
	for s, defs := range b.byScope {
		add("scope %s %+v", s, defs)
	}
	for k, bl := range b.balances {
		var open []string
		for id, r := range bl.open {
			if got, _ := b.get(id); got != r {
				add("balance %s open %s is not the book's reservation", k, id)
			}
			open = append(open, id)
		}
		sortStrings(open)
		add("balance %s ref=%+v rev=%d unit=%s limit=%s spent=%s reserved=%s overrun=%s exposure=%s open=%v alerted=%v arm=%d",
			k, bl.ref, bl.rev, bl.unit, bl.limit, bl.spent, bl.reserved, bl.overrun, bl.exposure, open, bl.alerted, bl.arm)
	}
	for _, k := range b.learned.Keys() {
		add("learned %s %s %v", k.Scope, k.Model, b.learned.Window(k).Costs())
	}
	for k, p := range b.prices {
		add("pricing %s def=%s src=%s hash=%s", k, mustJSON(p.def), mustJSON(p.src), hash(k))
	}
	for k, d := range b.defaults {
		add("default %s def=%s src=%s hash=%s", k, mustJSON(d.def), mustJSON(d.src), hash(k))
	}
	for kind, ds := range b.byKind {
		add("kind %s %d defaults", kind, len(ds))
	}
	for id, r := range b.reservations {
		c := *r
		c.due = 0
		c.Pricing = nil
		// A part's ceiling is a pointer: printed by value.
		var ceilings []string
		c.Parts = append([]Part(nil), r.Parts...)
		for i := range c.Parts {
			ceilings = append(ceilings, mustJSON(c.Parts[i].Ceiling))
			c.Parts[i].Ceiling = nil
		}
		add("reservation %s %+v pricing=%s ceilings=%v indexed=%v", id, c, mustJSON(r.Pricing), ceilings, r.due != 0)
	}
	for rid, r := range b.requests {
		add("request %s -> %s", rid, r.ID)
	}
	for rid, v := range b.voids {
		add("void %s %+v", rid, *v)
	}
	var voided []string // in queue order
	for _, c := range b.voided {
		if b.voids[c.r.RequestID] == c.r {
			voided = append(voided, c.r.RequestID+"@"+c.at.Format(time.RFC3339Nano))
		}
	}
	add("voided queue %v", voided)
	for name, which := range map[string]int{"closed": winClosed, "expired": winExpired} {
		var line []string // in queue order
		b.win.each(which, func(r *Reservation, at time.Time) {
			c := *r
			c.due = 0
			c.Pricing = nil
			line = append(line, fmt.Sprintf("%s@%s %+v pricing=%s", r.ID, at.Format(time.RFC3339Nano), c, mustJSON(r.Pricing)))
			if got, ok := b.get(r.ID); !ok || got.ID != r.ID {
				add("%s %s is not found by id", name, r.ID)
			}
			if got, ok := b.byRequest(r.RequestID); !ok || got.RequestID != r.RequestID {
				add("%s %s is not found by request id %s", name, r.ID, r.RequestID)
			}
		})
		add("%s queue %v", name, line)
	}
	add("window %d", b.win.len())
	add("pending %d serverNow %s due %d", len(b.pending), b.serverNow.Format(time.RFC3339Nano), len(b.due))
	// The per-tenant counts (tenants.go), and whether a recount of the
	// book agrees with them: every fold and snapshot test checks them.
	for t, n := range b.tenants.open {
		add("tenant %q open %d", t, n)
	}
	for t, n := range b.tenants.defaults {
		add("tenant %q default budgets %d", t, n)
	}
	for t, n := range b.tenants.budgets {
		add("tenant %q budgets %d", t, n)
	}
	recount := newTenantCounts()
	for _, r := range b.reservations {
		if r.Status == events.StatusOpen {
			addCount(recount.open, reservationTenant(r), 1)
		}
	}
	for _, d := range b.budgets {
		if m := recount.of(budgetClassOf(d.def.FromDefault, d.def.Retired)); m != nil {
			addCount(m, d.def.Ref.Scope.Tenant(), 1)
		}
	}
	if !maps.Equal(recount.open, b.tenants.open) || !maps.Equal(recount.defaults, b.tenants.defaults) || !maps.Equal(recount.budgets, b.tenants.budgets) {
		add("tenant counts %v %v %v differ from a recount of the book %v %v %v", b.tenants.open, b.tenants.defaults, b.tenants.budgets,
			recount.open, recount.defaults, recount.budgets)
	}
	// closed and expired keep their order; the rest is sorted.
	sortStrings(out)
	return strings.Join(out, "\n")
}

func sortStrings(s []string) { sort.Strings(s) }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// Revs returns the last revision of key the replica has seen (what its
// next compare-and-set names) and the last valid one (what the chain
// continues from).
func Revs(l *Ledger, key string) (seen, valid uint64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	valid, _ = l.bk.valid(key)
	return l.bk.rev(key), valid
}

// PublishHookForTesting puts f between every single lane write and the
// server: send is the real request, and f's answer is the write's.
func PublishHookForTesting(f func(ctx context.Context, m *nats.Msg, send func(context.Context, *nats.Msg) (*nats.Msg, error)) (*nats.Msg, error)) Option {
	return func(o *options) error {
		o.publishHook = f
		return nil
	}
}

// HasBalance reports whether l's book holds ref's balance (a pruned one
// it does not).
func HasBalance(l *Ledger, ref events.BalanceRef) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bk.balances[streams.BalanceKey(ref)] != nil
}

// DropBalanceForTesting removes ref's balance from l's book, as a wrong
// prune would.
func DropBalanceForTesting(l *Ledger, ref events.BalanceRef) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.bk.balances, streams.BalanceKey(ref))
}

// SnapshotTries is how many snapshots a replica reads at start.
const SnapshotTries = snapshotTries

// LeaderReads reads the messages at from to to one at a time through the
// stream's leader, as Refold did before its batched read: the baseline of
// BenchmarkRefold.
func LeaderReads(ctx context.Context, l *Ledger, from, to uint64) (int, error) {
	n := 0
	for seq := from; seq <= to; seq++ {
		_, found, err := l.leaderGet(ctx, leaderGetRequest{Seq: seq})
		if err != nil {
			return n, err
		}
		if found {
			n++
		}
	}
	return n, nil
}

// WithOrphanChunkAge sets how old chunks without a meta must be before
// pruning purges them (orphanChunkAge).
func WithOrphanChunkAge(d time.Duration) Option {
	return func(o *options) error {
		o.orphanAge = d
		return nil
	}
}
