package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
)

// The journal: a file where the gateway writes each call it is about to
// send upstream and, once its reservation's close landed (or was refused),
// that it is done. A gateway killed mid-call (SIGKILL, out of memory, a
// crash, the machine's power) loses its calls in flight and the closes
// waiting for a retry; the sweeper would then release their reservations
// at their expiry, and spend the provider billed would be in no budget. A
// gateway started again on the same journal closes each call left open:
// as its close was decided when one was (a usage, a release), else at its
// whole reservation, with the note reservation_gateway_restart (the call
// may have been billed in full; it cannot have cost more). The ledger
// takes such a settle up to 48 hours after the reservation's expiry.
//
// One line of JSON per record, appended without an fsync each (a process
// that dies keeps what it wrote; the file is fsynced every
// journalSyncEvery, so a machine that loses power loses at most that
// much). The file is locked while a gateway uses it: two gateways never
// share one. It is rewritten with the open calls alone when it starts and
// whenever it grows past journalCompactBytes.

// journalSyncEvery is how often the journal is fsynced;
// journalCompactBytes the size past which it is rewritten.
const (
	journalSyncEvery    = time.Second
	journalCompactBytes = 64 << 20
)

// NoteGatewayRestart is the settle note of a call a restarted gateway
// closed at its whole reservation from its journal.
const NoteGatewayRestart = "reservation_gateway_restart"

// journalRecord is one line: a call sent (Open), the close it is due
// (Due: how and, for a usage, its tokens), or its end (Done).
type journalRecord struct {
	Open *journalOpen `json:"open,omitempty"`
	Due  *journalDue  `json:"due,omitempty"`
	Done string       `json:"done,omitempty"`
}

// journalOpen is a call sent upstream: its reservation, the tenant whose
// subjects it was admitted on, and what it reserved.
type journalOpen struct {
	ReservationID string    `json:"reservation_id"`
	Tenant        string    `json:"tenant,omitempty"`
	Amount        string    `json:"amount"`
	Unit          string    `json:"unit"`
	ExpiresAt     time.Time `json:"expires_at"`
}

// journalDue is the close decided for a call whose close did not land yet:
// how ("usage", "reservation" or "released"), the usage's tokens, and the
// settle's note.
type journalDue struct {
	ReservationID string `json:"reservation_id"`
	How           string `json:"how"`
	Input         int64  `json:"input_tokens,omitempty"`
	Output        int64  `json:"output_tokens,omitempty"`
	Cached        int64  `json:"cached_input_tokens,omitempty"`
	Note          string `json:"note,omitempty"`
}

// journalCall is an open call as the journal holds it.
type journalCall struct {
	open journalOpen
	due  *journalDue
}

// journal is an open journal file. Safe for concurrent use.
type journal struct {
	path string
	mu   sync.Mutex
	f    *os.File
	size int64
	// open are the calls not done, by reservation id; earlier those the
	// file held open when it was opened: what RecoverJournal closes (the
	// calls this run sends are its own to close).
	open    map[string]*journalCall
	earlier []journalCall
	// err is the first write error: the journal then stops, loudly
	// (calls go on; a crash loses what was not written).
	err       error
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// openJournal opens (creating it) and locks the journal at path, and reads
// the calls it holds open.
func openJournal(path string) (*journal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("gateway: journal: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("gateway: journal %s is in use by another gateway (give each its own --journal): %w", path, err)
	}
	j := &journal{path: path, f: f, open: map[string]*journalCall{}, stop: make(chan struct{}), done: make(chan struct{})}
	if err := j.read(); err != nil {
		f.Close()
		return nil, err
	}
	if err := j.compact(); err != nil {
		f.Close()
		return nil, err
	}
	for _, c := range j.open {
		j.earlier = append(j.earlier, *c)
	}
	go j.syncLoop()
	return j, nil
}

// read folds the file's records into open. Every whole line must be a
// record and nothing else: a file that is not a journal is refused, never
// taken for an empty one (and rewritten). A last line without its newline
// that begins as a record does is one cut short (the process died while
// writing it), and is dropped.
func (j *journal) read() error {
	if _, err := j.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("gateway: journal: %w", err)
	}
	data, err := io.ReadAll(j.f)
	if err != nil {
		return fmt.Errorf("gateway: journal %s: %w", j.path, err)
	}
	lines := bytes.Split(data, []byte("\n"))
	last := lines[len(lines)-1] // after the last newline: "" or a line cut short
	for i, line := range lines[:len(lines)-1] {
		r, ok := parseRecord(line)
		if !ok {
			return fmt.Errorf("gateway: journal %s: line %d is not a journal record (is --journal another file?)", j.path, i+1)
		}
		j.apply(r)
	}
	if len(last) > 0 && !bytes.HasPrefix(last, []byte(`{"open":`)) && !bytes.HasPrefix(last, []byte(`{"due":`)) &&
		!bytes.HasPrefix(last, []byte(`{"done":`)) {
		return fmt.Errorf("gateway: journal %s: line %d is not a journal record (is --journal another file?)", j.path, len(lines))
	}
	return nil
}

// parseRecord decodes one line: a record with exactly one of its parts,
// and no field a journal does not write.
func parseRecord(line []byte) (journalRecord, bool) {
	var r journalRecord
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields()
	if err := d.Decode(&r); err != nil || d.More() {
		return r, false
	}
	n := 0
	if r.Open != nil && r.Open.ReservationID != "" {
		n++
	}
	if r.Due != nil && r.Due.ReservationID != "" {
		n++
	}
	if r.Done != "" {
		n++
	}
	return r, n == 1
}

func (j *journal) apply(r journalRecord) {
	switch {
	case r.Open != nil:
		j.open[r.Open.ReservationID] = &journalCall{open: *r.Open}
	case r.Due != nil:
		if c := j.open[r.Due.ReservationID]; c != nil {
			c.due = r.Due
		}
	case r.Done != "":
		delete(j.open, r.Done)
	}
}

// compact rewrites the file with the open calls alone (a temporary file
// renamed over it), and appends to it from then on. The caller holds mu,
// or no other goroutine has j yet.
func (j *journal) compact() error {
	tmp, err := os.CreateTemp(filepath.Dir(j.path), ".journal-*")
	if err != nil {
		return fmt.Errorf("gateway: journal: %w", err)
	}
	w := bufio.NewWriter(tmp)
	var size int64
	put := func(r journalRecord) {
		b, _ := json.Marshal(r)
		n, _ := w.Write(append(b, '\n'))
		size += int64(n)
	}
	for _, c := range j.open {
		put(journalRecord{Open: &c.open})
		if c.due != nil {
			put(journalRecord{Due: c.due})
		}
	}
	if err := errors.Join(w.Flush(), tmp.Sync(), tmp.Chmod(0o600), tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("gateway: journal: %w", err)
	}
	f, err := os.OpenFile(tmp.Name(), os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("gateway: journal: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("gateway: journal: %w", err)
	}
	if err := os.Rename(tmp.Name(), j.path); err != nil {
		f.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("gateway: journal: %w", err)
	}
	old := j.f
	j.f, j.size = f, size
	return old.Close()
}

// write appends r, and folds it into open.
func (j *journal) write(r journalRecord) {
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.apply(r)
	if j.err != nil {
		return
	}
	n, err := j.f.Write(append(b, '\n'))
	j.size += int64(n)
	if err == nil && j.size > journalCompactBytes {
		err = j.compact()
	}
	j.err = err
}

// opened records a call about to be sent upstream.
func (j *journal) opened(tenant string, res *client.Reservation) {
	j.write(journalRecord{Open: &journalOpen{ReservationID: res.ID(), Tenant: tenant, Amount: res.Amount(), Unit: res.Unit(),
		ExpiresAt: res.ExpiresAt()}})
}

// owes records the close p is due, waiting for a retry.
func (j *journal) owes(p *pendingClose) {
	d := &journalDue{ReservationID: p.res.ID(), How: p.how}
	if p.how == "usage" {
		d.Input, d.Output, d.Cached = p.o.u.input, p.o.u.output, p.o.u.cached
	}
	if p.how != "released" {
		d.Note = p.note
	}
	j.write(journalRecord{Due: d})
}

// closed records that a call needs nothing more.
func (j *journal) closed(id string) { j.write(journalRecord{Done: id}) }

// Err is the journal's first write error (nil: none).
func (j *journal) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// leftOpen returns the calls an earlier run left open that are still
// open.
func (j *journal) leftOpen() []journalCall {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []journalCall
	for _, c := range j.earlier {
		if _, ok := j.open[c.open.ReservationID]; ok {
			out = append(out, c)
		}
	}
	return out
}

func (j *journal) syncLoop() {
	defer close(j.done)
	t := time.NewTicker(journalSyncEvery)
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-t.C:
			j.mu.Lock()
			if j.err == nil {
				j.err = j.f.Sync()
			}
			j.mu.Unlock()
		}
	}
}

// close syncs and closes the file (its lock goes with it); a second call
// does nothing.
func (j *journal) close() error {
	var err error
	j.closeOnce.Do(func() {
		close(j.stop)
		<-j.done
		j.mu.Lock()
		defer j.mu.Unlock()
		err = errors.Join(j.f.Sync(), j.f.Close())
	})
	return err
}

// RecoverJournal closes the calls the journal holds open from an earlier
// run (see the journal): each as its close was decided, else settled at
// its whole reservation (NoteGatewayRestart). A close the ledger does not
// answer stays open for the next start; a refused one (the reservation
// was closed meanwhile, or is past its late-settle window) is done. It
// returns how many it closed and how many stay open. Without a journal it
// does nothing.
func (g *Gateway) RecoverJournal(ctx context.Context) (closed, left int) {
	if g.jr == nil {
		return 0, 0
	}
	for _, c := range g.jr.leftOpen() {
		cl, err := g.clients.Held(c.open.Tenant)
		if err != nil {
			left++
			continue
		}
		how, reply, err := recoverCall(ctx, cl, c)
		switch {
		case err == nil:
			closed++
			g.jr.closed(c.open.ReservationID)
			g.log.Info("gateway: closed a call left open by an earlier run (journal)", "reservation", c.open.ReservationID,
				"tenant", c.open.Tenant, "closed", how, "actual", reply.Actual, "unit", c.open.Unit, "late", reply.Late, "replayed", reply.Replayed)
		case errors.Is(err, client.ErrUnavailable):
			left++
			g.log.Warn("gateway: a call left open by an earlier run could not be closed now; the next start tries again",
				"reservation", c.open.ReservationID, "closed", how, "err", err)
		case events.CodeOf(err) == events.CodeAlreadySettled || events.CodeOf(err) == events.CodeAlreadyReleased:
			// Its close landed before the earlier run could write so.
			closed++
			g.jr.closed(c.open.ReservationID)
			g.log.Info("gateway: a call left open by an earlier run was closed already", "reservation", c.open.ReservationID,
				"code", events.CodeOf(err))
		default:
			g.jr.closed(c.open.ReservationID)
			g.log.Error("gateway: the ledger refused the close of a call left open by an earlier run", "reservation", c.open.ReservationID,
				"closed", how, "amount", c.open.Amount, "unit", c.open.Unit, "code", events.CodeOf(err), "err", err)
		}
	}
	return closed, left
}

// recoverCall closes c through cl as the journal says.
func recoverCall(ctx context.Context, cl *client.Client, c journalCall) (string, events.CloseReply, error) {
	id := c.open.ReservationID
	if d := c.due; d != nil {
		switch d.How {
		case "released":
			r, err := cl.Release(ctx, events.ReleaseRequest{ReservationID: id})
			return d.How, r, err
		case "usage":
			r, err := cl.Settle(ctx, events.SettleRequest{ReservationID: id, InputTokens: d.Input, OutputTokens: d.Output, CachedInputTokens: d.Cached, Note: d.Note})
			return d.How, r, err
		case "reservation":
			r, err := cl.Settle(ctx, events.SettleRequest{ReservationID: id, Actual: c.open.Amount, Note: d.Note})
			return d.How, r, err
		}
	}
	r, err := cl.Settle(ctx, events.SettleRequest{ReservationID: id, Actual: c.open.Amount, Note: NoteGatewayRestart})
	return "reservation", r, err
}
