package ledger

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// trickle is a snapshot object that arrives only as far as it is waited
// for: a Wait(n) makes n bytes and up to extra more arrive (or fails past
// failAt, when set). wholes counts the Waits for all of it.
type trickle struct {
	mu     sync.Mutex
	data   []byte
	avail  int
	rng    *rand.Rand
	extra  int
	failAt int
	wholes int
}

var errTrickle = errors.New("the connection broke")

func (o *trickle) Wait(n int) ([]byte, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if n >= len(o.data) {
		o.wholes++
	}
	if n > o.avail {
		o.avail = min(len(o.data), n+o.rng.IntN(o.extra+1))
	}
	if o.failAt > 0 && o.avail > o.failAt {
		o.avail = o.failAt
		return o.data[:o.avail:o.avail], errTrickle
	}
	if o.avail == len(o.data) {
		return o.data, io.EOF
	}
	return o.data[:o.avail:o.avail], nil
}

func (o *trickle) Size() int { return len(o.data) }

func (o *trickle) All() ([]byte, error) {
	buf, err := o.Wait(len(o.data) + 1)
	if errors.Is(err, io.EOF) {
		return buf, nil
	}
	return nil, err
}

// TestSnapshot_WindowReadAsItArrives: a replica decodes a snapshot's window
// section while the object arrives, each entry (and the units and quotes
// tables) as soon as its first bytes did. An entry longer than what
// arrived is read again once the whole section did. Whatever the bytes'
// arrival, the book must be the one the whole section loads into. With
// steps of 1 byte and arrivals of at most 48 bytes past a wait, an entry
// (and the tables) is cut short at once, so the reading again runs: the
// test asserts it did (wholes). How it can fail: a cut entry whose
// partial reads (the stamp's delta, a slab's winExtra, a flushed batch)
// are not undone before it is read again, a count checked against the
// bytes arrived instead of the section's, or the bytes after the window
// checked before they arrived.
func TestSnapshot_WindowReadAsItArrives(t *testing.T) {
	b, seq := aheadBook(t)
	st, err := b.snapshotAs(seq, SnapshotVersion)
	require.NoError(t, err)
	data, err := encodeSnapshot(st, "", nil)
	require.NoError(t, err)
	whole, err := decodeSnapshot(data)
	require.NoError(t, err)
	want, err := bookFromSnapshot(b.layout, b.retention, b.expiredKeep, whole)
	require.NoError(t, err)
	require.Equal(t, bookView(b), bookView(want))
	window := whole.window
	tables := newSectionReader(window)
	_, _, err = newBook(b.layout, b.retention, b.expiredKeep).loadTables(tables, SnapshotVersion)
	require.NoError(t, err)
	for _, c := range []struct {
		name          string
		entry, tables int
	}{
		// The tables arrive whole, and little more: the count of
		// entries is checked against the section's bytes, not those
		// arrived; then every entry is cut.
		{"entries cut", 1, tables.pos() + 1},
		{"tables cut", 1, 1},
		{"ahead of everything", len(window), len(window)},
	} {
		for seed := uint64(0); seed < 20; seed++ {
			src := &trickle{data: window, rng: rand.New(rand.NewPCG(seed, 7)), extra: 48}
			r := &sectionReader{end: len(window), ahead: src}
			r.step.entry, r.step.tables = c.entry, c.tables
			st, err := decodeSnapshot(data)
			require.NoError(t, err)
			st.window, st.windowAhead = nil, r
			got, err := bookFromSnapshot(b.layout, b.retention, b.expiredKeep, st)
			require.NoError(t, err, "%s, seed %d", c.name, seed)
			require.Equal(t, bookView(want), bookView(got), "%s, seed %d", c.name, seed)
			if c.entry < len(window) {
				require.Positive(t, src.wholes, "%s, seed %d: no entry was read again", c.name, seed)
			}
		}
	}
	// Reading that fails part way fails the load, wherever it breaks.
	for _, at := range []int{1, len(window) / 3, len(window) - 1} {
		src := &trickle{data: window, rng: rand.New(rand.NewPCG(1, 2)), extra: 48, failAt: at}
		r := &sectionReader{end: len(window), ahead: src}
		r.step.entry, r.step.tables = 1, 1
		st, err := decodeSnapshot(data)
		require.NoError(t, err)
		st.window, st.windowAhead = nil, r
		_, err = bookFromSnapshot(b.layout, b.retention, b.expiredKeep, st)
		require.ErrorIs(t, err, errTrickle, "broken at %d", at)
	}
}

// aheadBook is v3Book with 40 more entries in its window, stamped a
// millisecond apart (a stamp is a delta from the one before), each held in
// two balances and priced.
func aheadBook(t *testing.T) (*book, uint64) {
	b, seq := v3Book(t)
	var bals []*balance
	for _, bl := range b.balances {
		bals = append(bals, bl)
	}
	require.Len(t, bals, 2)
	for i := range 40 {
		q := events.PriceQuote{Model: "m", Version: 2, Unit: "USD", Input: events.MustMoney("1"), Output: events.MustMoney("2"), InputTokens: int64(i), MaxOutputTokens: 10}
		r := &Reservation{ID: "rsv_" + uuid.NewString(), RequestID: uuid.NewString(), RequestHash: fmt.Sprintf("%032x", i),
			OpenedAt: bookT0, ExpiresAt: bookT0.Add(time.Minute), Status: events.StatusSettled, Pricing: &q}
		for _, bl := range bals {
			r.Balances = append(r.Balances, bl.ref)
			r.Parts = append(r.Parts, Part{Key: bl.key, Unit: "USD", Amount: events.MustMoney("0.5"), Actual: events.MustMoney(fmt.Sprintf("0.%d", i+1))})
		}
		b.win.add(winClosed, r, b.balances, bookT0.Add(3*time.Second+time.Duration(i)*time.Millisecond))
	}
	return b, seq
}

// TestSnapshot_DecodedAsItArrives: the whole of decodeSnapshotAhead, as a
// replica's restart runs it: header, JSON line and window decoded as the
// object arrives, the body hashed beside them. The book equals the one the
// whole object loads into; a body changed after it was signed (one byte
// of the window) is refused by the digest however it decodes; an object
// whose reading breaks off is refused, never loaded as far as it got.
func TestSnapshot_DecodedAsItArrives(t *testing.T) {
	b, seq := aheadBook(t)
	st, err := b.snapshotAs(seq, SnapshotVersion)
	require.NoError(t, err)
	data, err := encodeSnapshot(st, "", nil)
	require.NoError(t, err)
	want, err := bookFromSnapshot(b.layout, b.retention, b.expiredKeep, must(decodeSnapshot(data)))
	require.NoError(t, err)
	load := func(o objectAhead) (*book, error) {
		st, h, ahead, err := decodeSnapshotAhead(o, nil)
		if err != nil {
			return nil, err
		}
		got, err := bookFromSnapshot(b.layout, b.retention, b.expiredKeep, st)
		if cerr := ahead.check(h); cerr != nil {
			return nil, cerr
		}
		return got, err
	}
	for seed := uint64(0); seed < 20; seed++ {
		got, err := load(&trickle{data: data, rng: rand.New(rand.NewPCG(seed, 9)), extra: 300})
		require.NoError(t, err, "seed %d", seed)
		require.Equal(t, bookView(want), bookView(got), "seed %d", seed)
	}
	// One byte of the window's last entry changed (its last amount's
	// exponent byte, so that it still decodes).
	bad := append([]byte(nil), data...)
	bad[len(bad)-2] ^= 1
	_, err = load(&trickle{data: bad, rng: rand.New(rand.NewPCG(1, 1)), extra: 300})
	require.ErrorIs(t, err, ErrSnapshotInvalid)
	require.ErrorContains(t, err, "digest mismatch")
	for _, at := range []int{10, len(data) / 2, len(data) - 1} {
		_, err := load(&trickle{data: data, rng: rand.New(rand.NewPCG(1, 1)), extra: 300, failAt: at})
		require.ErrorIs(t, err, ErrSnapshotInvalid, "broken at %d", at)
		require.ErrorIs(t, err, errTrickle, "broken at %d", at)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestSnapshot_WindowBufferSizedFromTheLast: a snapshot's window section is
// encoded under the book's read lock, into a buffer sized before it. Sized
// at the default bytes per entry, a window of entries held in two balances
// and priced outgrows it (and was copied over and over by append, while
// every admit waited); the next snapshot, and the first after a load, must
// size it from the last section. How it can fail: the size not recorded,
// or recorded from something else than the section's bytes per entry.
func TestSnapshot_WindowBufferSizedFromTheLast(t *testing.T) {
	b, seq := aheadBook(t)
	n := b.win.rings[winClosed].n + b.win.rings[winExpired].n
	first := 64 + b.win.sectionBytes(n)
	st, err := b.snapshotCopy(seq, SnapshotVersion)
	require.NoError(t, err)
	require.Greater(t, len(st.window), first, "the default size should not fit this window, or the test shows nothing")
	next := 64 + b.win.sectionBytes(n)
	st2, err := b.snapshotCopy(seq, SnapshotVersion)
	require.NoError(t, err)
	require.Equal(t, st.window, st2.window)
	require.LessOrEqual(t, len(st2.window), next)

	// A book loaded from the snapshot sizes its first one so too.
	data, err := encodeSnapshot(must(b.snapshotAs(seq, SnapshotVersion)), "", nil)
	require.NoError(t, err)
	got, err := bookFromSnapshot(b.layout, b.retention, b.expiredKeep, must(decodeSnapshot(data)))
	require.NoError(t, err)
	require.LessOrEqual(t, len(st.window), 64+got.win.sectionBytes(n))
}
