package projector

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/streams"
)

// An archive is the ledger stream's old messages, in a directory of
// segment files an auditor can read without NATS:
//
//	segment-<first seq, 20 digits>-<last seq, 20 digits>.jsonl.gz
//
// Each is gzip-compressed JSON Lines: a header line, then one line per
// stream message in sequence order:
//
//	{"format":"spendgate.archive","version":1,"stream":S,"first":F,"last":L,
//	 "count":N,"prev":P,"sha256":H}
//	{"seq":F,"subject":"$KV.spendgate.lane.0","time":"...","data":"<base64>","header":{...}}
//
// P is the SHA-256 of the previous segment's file ("" for the first
// segment) and H the SHA-256 of the message lines: an edited, truncated,
// missing or reordered segment breaks the chain or its digest. The
// payloads keep the ledger's own chain (every lane and budget revision
// names its predecessor's sequence and payload hash), which continues into
// the stream: an archive rewritten with consistent digests still breaks
// the revision chain where it meets what NATS holds. A segment is written
// to a temporary file, synced and renamed into place, so a crash leaves
// whole segments and a temporary file that the next run removes.

// Archive format constants.
const (
	ArchiveFormat  = "spendgate.archive"
	ArchiveVersion = 1
	// DefaultSegmentMessages is how many messages a segment holds at most.
	DefaultSegmentMessages = 50_000
	// segmentMaxBytes bounds a segment's payload bytes (it is built in
	// memory before it is written).
	segmentMaxBytes = 64 << 20
	segmentPrefix   = "segment-"
	segmentSuffix   = ".jsonl.gz"
	tmpSuffix       = ".tmp"
)

// ErrArchive marks an archive that fails verification.
var ErrArchive = errors.New("projector: archive")

type segmentHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Stream  string `json:"stream"`
	First   uint64 `json:"first"`
	Last    uint64 `json:"last"`
	Count   int    `json:"count"`
	Prev    string `json:"prev"`
	SHA256  string `json:"sha256"`
}

type archivedMsg struct {
	Seq     uint64    `json:"seq"`
	Subject string    `json:"subject"`
	Time    time.Time `json:"time"`
	Data    []byte    `json:"data"`
	// Header is the message's NATS header (a revision's signature), if
	// it had one.
	Header nats.Header `json:"header,omitempty"`
}

// ArchiveInfo describes a verified archive.
type ArchiveInfo struct {
	// Dir is the archive's directory.
	Dir string
	// Segments is the number of segments; First and Last the stream
	// sequences of the first and last message archived (0 when empty);
	// Messages how many there are.
	Segments    int
	First, Last uint64
	Messages    int
	// Head is the SHA-256 of the last segment's file: what the next
	// segment names.
	Head string
	segs []segmentFile
}

type segmentFile struct {
	path        string
	first, last uint64
}

func segmentName(first, last uint64) string {
	return fmt.Sprintf("%s%020d-%020d%s", segmentPrefix, first, last, segmentSuffix)
}

// VerifyArchive reads every segment of the archive in dir for stream and
// checks the chain: each header's format, its prev (the SHA-256 of the
// previous segment file), its message digest and count, and sequences
// that only increase across the archive. A directory with no segment is an
// empty archive. Errors wrap ErrArchive and name the segment.
func VerifyArchive(dir, stream string) (ArchiveInfo, error) {
	info := ArchiveInfo{Dir: dir}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return info, nil
	}
	if err != nil {
		return info, fmt.Errorf("%w: %v", ErrArchive, err)
	}
	for _, e := range entries {
		var first, last uint64
		if _, err := fmt.Sscanf(e.Name(), segmentPrefix+"%020d-%020d"+segmentSuffix, &first, &last); err == nil && e.Name() == segmentName(first, last) {
			info.segs = append(info.segs, segmentFile{filepath.Join(dir, e.Name()), first, last})
		}
	}
	sort.Slice(info.segs, func(i, j int) bool { return info.segs[i].first < info.segs[j].first })
	for _, sg := range info.segs {
		var n int
		err := readSegment(sg, stream, info.Head, info.Last, func(m archivedMsg) error { n++; return nil }, &info.Head)
		if err != nil {
			return info, err
		}
		if info.First == 0 {
			info.First = sg.first
		}
		info.Last = sg.last
		info.Messages += n
		info.Segments++
	}
	return info, nil
}

// readSegment reads one segment, checks it against the previous
// segment's file hash prev and last sequence after, hands its messages to
// fn in order, and stores its file hash in head.
func readSegment(sg segmentFile, stream, prev string, after uint64, fn func(archivedMsg) error, head *string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: segment %s: %s", ErrArchive, filepath.Base(sg.path), fmt.Sprintf(format, args...))
	}
	raw, err := os.ReadFile(sg.path)
	if err != nil {
		return bad("%v", err)
	}
	fileSum := sha256.Sum256(raw)
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return bad("%v", err)
	}
	body, err := io.ReadAll(zr)
	if err != nil {
		return bad("%v", err)
	}
	nl := bytes.IndexByte(body, '\n')
	if nl < 0 {
		return bad("no header")
	}
	var h segmentHeader
	if err := json.Unmarshal(body[:nl], &h); err != nil {
		return bad("header: %v", err)
	}
	switch {
	case h.Format != ArchiveFormat || h.Version != ArchiveVersion:
		return bad("format %q version %d", h.Format, h.Version)
	case h.Stream != stream:
		return bad("of stream %s, not %s", h.Stream, stream)
	case h.First != sg.first || h.Last != sg.last:
		return bad("header says %d..%d", h.First, h.Last)
	case h.Prev != prev:
		return bad("names previous segment %q, the archive's is %q (a segment edited, missing or reordered)", h.Prev, prev)
	case h.First <= after:
		return bad("starts at %d, at or before the previous segment's last %d", h.First, after)
	}
	lines := body[nl+1:]
	sum := sha256.Sum256(lines)
	if hex.EncodeToString(sum[:]) != h.SHA256 {
		return bad("message digest mismatch (edited?)")
	}
	sc := bufio.NewScanner(bytes.NewReader(lines))
	sc.Buffer(make([]byte, 0, 1<<20), segmentMaxBytes+1<<20)
	n, last := 0, after
	for sc.Scan() {
		var m archivedMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return bad("message %d: %v", n, err)
		}
		if m.Seq <= last || m.Seq < h.First || m.Seq > h.Last {
			return bad("message %d at seq %d out of order", n, m.Seq)
		}
		last = m.Seq
		n++
		if err := fn(m); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return bad("%v", err)
	}
	if n != h.Count || last != h.Last {
		return bad("%d messages ending at %d, header says %d ending at %d", n, last, h.Count, h.Last)
	}
	*head = hex.EncodeToString(fileSum[:])
	return nil
}

// eachArchived hands fn the archived messages with sequence from..until,
// in order, re-checking each segment as it reads it.
func (a *ArchiveInfo) eachArchived(stream string, layout streams.Layout, from, until uint64, fn func(message) error) error {
	prev, after := "", uint64(0)
	for _, sg := range a.segs {
		if sg.first > until {
			return nil
		}
		// Every segment up to until is read, those before from too: the
		// chain is checked from the first.
		err := readSegment(sg, stream, prev, after, func(m archivedMsg) error {
			if m.Seq < from || m.Seq > until {
				return nil
			}
			key, ok := layout.KeyOf(m.Subject)
			if !ok {
				return fmt.Errorf("%w: seq %d: subject %q is outside the ledger's keys", ErrArchive, m.Seq, m.Subject)
			}
			return fn(message{seq: m.Seq, subject: m.Subject, key: key, header: m.Header, data: m.Data, at: m.Time})
		}, &prev)
		if err != nil {
			return err
		}
		after = sg.last
	}
	return nil
}

// UseArchive makes the projector read the archive in dir before the
// stream: every read (CatchUp, ReplayUntil, Run, Rows, reports and Check
// through WithArchive) takes the messages up to the archive's last
// sequence from the archive and the rest from the stream, so a stream
// trimmed below the archive's end replays as before the trim. The archive
// is verified first (VerifyArchive).
func (p *Projector) UseArchive(dir string) (ArchiveInfo, error) {
	info, err := VerifyArchive(dir, p.layout.StreamName())
	if err != nil {
		return info, err
	}
	p.arch = &info
	return info, nil
}

// ArchiveOptions configure Archive.
type ArchiveOptions struct {
	// Until is the last stream sequence to archive; 0 means the newest
	// ledger snapshot's sequence (what a trim can drop).
	Until uint64
	// SegmentMessages caps a segment's messages (DefaultSegmentMessages
	// when 0).
	SegmentMessages int
	// Progress, if set, is told the sequence of every message archived
	// and Until.
	Progress func(seq, until uint64)
}

// Archive appends the ledger stream's messages after the archive's last
// one, up to opts.Until, to the archive in dir as new segments, and
// returns the archive. A temporary file left by an interrupted run is
// removed first, and the existing archive verified; a run that is killed
// leaves only whole segments, and the next run continues after them.
//
// Errors: an archive that fails verification (ErrArchive), no snapshot
// when Until is 0, a stream that no longer holds the messages after the
// archive (trimmed without archiving them), a read or write error.
func Archive(ctx context.Context, js jetstream.JetStream, layout streams.Layout, dir string, opts ArchiveOptions) (ArchiveInfo, error) {
	if opts.SegmentMessages <= 0 {
		opts.SegmentMessages = DefaultSegmentMessages
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ArchiveInfo{}, err
	}
	tmps, _ := filepath.Glob(filepath.Join(dir, "*"+tmpSuffix))
	for _, t := range tmps {
		_ = os.Remove(t)
	}
	p := New(js, layout)
	s, last, err := p.stream(ctx)
	if err != nil {
		return ArchiveInfo{}, err
	}
	info, err := VerifyArchive(dir, layout.StreamName())
	if err != nil {
		return info, err
	}
	until := opts.Until
	if until == 0 {
		_, seq, _, ok, _, err := newestSnapshot(ctx, js, layout, last)
		if err != nil {
			return info, err
		}
		if !ok {
			return info, errors.New("projector: archive: no ledger snapshot to archive up to (write one with spendgate snapshot, or name the last sequence)")
		}
		until = seq
	}
	until = min(until, last)
	if until <= info.Last {
		return info, nil
	}
	if first := s.CachedInfo().State.FirstSeq; first > info.Last+1 {
		return info, fmt.Errorf("projector: archive: the stream starts at %d; messages %d..%d are neither archived nor in the stream", first, info.Last+1, first-1)
	}
	var (
		buf   []byte
		count int
		first uint64
		lastM uint64
	)
	flush := func() error {
		if count == 0 {
			return nil
		}
		sum := sha256.Sum256(buf)
		h, err := json.Marshal(segmentHeader{Format: ArchiveFormat, Version: ArchiveVersion, Stream: layout.StreamName(),
			First: first, Last: lastM, Count: count, Prev: info.Head, SHA256: hex.EncodeToString(sum[:])})
		if err != nil {
			return err
		}
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, _ = zw.Write(append(h, '\n'))
		_, _ = zw.Write(buf)
		if err := zw.Close(); err != nil {
			return err
		}
		name := segmentName(first, lastM)
		if err := writeFileSync(filepath.Join(dir, name), z.Bytes()); err != nil {
			return err
		}
		fileSum := sha256.Sum256(z.Bytes())
		info.Head = hex.EncodeToString(fileSum[:])
		info.segs = append(info.segs, segmentFile{filepath.Join(dir, name), first, lastM})
		if info.First == 0 {
			info.First = first
		}
		info.Last = lastM
		info.Messages += count
		info.Segments++
		buf, count = buf[:0], 0
		return nil
	}
	err = p.read(ctx, s, info.Last+1, until, func(m message) error {
		line, err := json.Marshal(archivedMsg{Seq: m.seq, Subject: m.subject, Time: m.at, Data: m.data, Header: m.header})
		if err != nil {
			return err
		}
		if count == 0 {
			first = m.seq
		}
		buf = append(append(buf, line...), '\n')
		count++
		lastM = m.seq
		if opts.Progress != nil {
			opts.Progress(m.seq, until)
		}
		if count >= opts.SegmentMessages || len(buf) >= segmentMaxBytes {
			return flush()
		}
		return nil
	})
	if err != nil {
		return info, err
	}
	return info, flush()
}

// writeFileSync writes data to path through a synced temporary file and a
// rename, then syncs the directory.
func writeFileSync(path string, data []byte) error {
	tmp := path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// TrimResult is what Trim did.
type TrimResult struct {
	// Snapshot is the verified snapshot the stream was trimmed below.
	Snapshot SnapshotCheck
	// Before and After are the stream's message counts around the trim.
	Before, After uint64
	// SnapshotFile is the copy of that snapshot, as the audit verified
	// it, kept in the archive's directory: a replica on the trimmed
	// stream starts only from a snapshot, and this is the one to put back
	// (spendgate snapshot --restore) if the bucket loses it.
	SnapshotFile string
}

// ReportSection is the name of the spend report's section in a replica's
// ledger snapshots (internal/report's Aggregator writes it): Trim requires
// it in the snapshot it trims to.
const ReportSection = "report"

// Trim drops from the ledger stream what the archive in dir and the
// newest ledger snapshot cover. First it audits archive + stream (Check
// with WithArchive): the audit must pass, the newest snapshot must equal
// the replay at its sequence S, and the archive must reach S. Then, for
// every lane and budget key the snapshot names at revision R (the
// snapshot as the audit read and verified it, not read again), the stream
// drops that key's messages before R. What stays is each key's last
// revision at or before S (the revisions the snapshot names, which a
// starting replica reads back) and everything after S; keys of other
// families are left alone.
//
// The stream must have been created trimmable (streams.Config.Trimmable):
// by default the book of record denies purges, and JetStream cannot lift
// that afterwards.
//
// The snapshot must carry the spend report's section (ReportSection), as
// replicas write them: a replica that starts after the trim can no longer
// fold the report from the stream's start.
//
// Before it purges, it writes the snapshot as the audit verified it into
// dir, named as in the bucket (TrimResult.SnapshotFile).
//
// Errors: the audit's problems, a snapshot not verified or without the
// report's section, an archive short of S (nothing is trimmed then), the
// snapshot's copy not written (nothing is trimmed then), a purge error (the keys purged before it stay purged; a rerun finishes).
func Trim(ctx context.Context, js jetstream.JetStream, layout streams.Layout, dir string, opts ...CheckOption) (TrimResult, error) {
	var res TrimResult
	s, err := js.Stream(ctx, layout.StreamName())
	if err != nil {
		return res, err
	}
	if s.CachedInfo().Config.DenyPurge {
		return res, fmt.Errorf("projector: trim: stream %s denies purges: it was created without serve --trimmable (streams.Config.Trimmable), which JetStream cannot change afterwards: archive it; only a stream created trimmable can be trimmed", layout.StreamName())
	}
	var verified []byte
	rep, err := Check(ctx, js, layout, append([]CheckOption{WithArchive(dir)}, append(opts, withVerifiedSnapshot(&verified))...)...)
	if err != nil {
		return res, err
	}
	if !rep.OK() {
		return res, fmt.Errorf("projector: trim: the audit of archive + stream fails:\n%s", rep)
	}
	if !rep.Snapshot.Verified {
		return res, errors.New("projector: trim: no ledger snapshot equals the replay; write one (spendgate snapshot) and archive up to it")
	}
	res.Snapshot = rep.Snapshot
	info, err := VerifyArchive(dir, layout.StreamName())
	if err != nil {
		return res, err
	}
	if info.Last < rep.Snapshot.Seq {
		return res, fmt.Errorf("projector: trim: the archive ends at %d, before the snapshot's %d: run spendgate audit archive first", info.Last, rep.Snapshot.Seq)
	}
	if s, err = js.Stream(ctx, layout.StreamName()); err != nil {
		return res, err
	}
	// The snapshot as the audit read and verified it, never the object
	// read again: whoever may write the bucket could have replaced it
	// since with one naming later revisions, whose purge would drop
	// history no archive holds.
	b, err := decodeSnap(verified)
	if err != nil || b.Seq != rep.Snapshot.Seq {
		return res, fmt.Errorf("projector: trim: snapshot %s as the audit verified it: %v", rep.Snapshot.Name, err)
	}
	if _, ok := b.Sections[ReportSection]; !ok {
		return res, fmt.Errorf("projector: trim: snapshot %s has no %q section: a replica started after the trim could not rebuild its spend report; let a replica of this version write a snapshot (or spendgate snapshot) and archive up to it", rep.Snapshot.Name, ReportSection)
	}
	// Kept before anything is purged: once the stream is trimmed, the
	// bucket's copy is the only start a replica has, and whoever may
	// write the bucket may delete it.
	res.SnapshotFile = filepath.Join(dir, rep.Snapshot.Name)
	if err := writeFileSync(res.SnapshotFile, verified); err != nil {
		return res, fmt.Errorf("projector: trim: keeping a copy of snapshot %s: %w", rep.Snapshot.Name, err)
	}
	res.Before = s.CachedInfo().State.Msgs
	keys := append([]snapKey(nil), b.LaneRevs...)
	for _, d := range b.Budgets {
		keys = append(keys, d.snapKey)
	}
	for _, k := range keys {
		if !streams.IsLaneKey(k.Key) && !streams.IsBudgetKey(k.Key) || k.Rev == 0 {
			continue
		}
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(layout.Subject(k.Key)), jetstream.WithPurgeSequence(k.Rev)); err != nil {
			return res, fmt.Errorf("projector: trim: purge %s below %d: %w", k.Key, k.Rev, err)
		}
	}
	si, err := s.Info(ctx)
	if err != nil {
		return res, err
	}
	res.After = si.State.Msgs
	return res, nil
}
