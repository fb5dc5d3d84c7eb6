package main

import (
	"fmt"
	"os"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

var (
	auditArchiveCommand = command{
		name:     "spendgate audit archive",
		synopsis: "--dir DIR [--until SEQ] [--segment-messages N] [--within 30m] [--nats-url URL] [--bucket NAME]",
		about: `Appends the ledger stream's revisions after the archive's last one, up to
--until (default: the newest ledger snapshot), to the archive in --dir as
gzip-compressed, hash-chained segment files. A run that is interrupted
leaves whole segments; the next run continues after them.`,
	}
	auditTrimCommand = command{
		name:     "spendgate audit trim",
		synopsis: "--dir DIR (--trusted-keys KEYS | --unverified) [--reviewed SEQ,...] [--within 30m] [--nats-url URL] [--bucket NAME]",
		about: `Audits archive + stream; if the audit passes (skipped revisions named by
--reviewed, as for audit check, are no failure), the newest snapshot equals the
replay and the archive reaches it, drops from the stream every revision
older than the one each key had at the snapshot. Unless a spend report
snapshot at or after the snapshot's sequence exists, it first writes one
(folded over the archive), so that a replica's report restarts after the
trim. Afterwards audit with --archive DIR; replicas start from the snapshots.`,
	}
)

// auditArchive is spendgate audit archive|trim.
func auditArchive(which string, args []string) int {
	cmd := auditArchiveCommand
	if which == "trim" {
		cmd = auditTrimCommand
	}
	fs := newFlagSet("audit " + which)
	var c clientFlags
	c.register(fs)
	bucket := fs.String("bucket", streams.DefaultBucket, "ledger bucket name")
	dir := fs.String("dir", "", "the archive's directory")
	within := withinFlag(fs, offlineWithin)
	var until *uint64
	var segment *int
	var vf verifyFlags
	var reviewed *string
	if which == "trim" {
		vf.register(fs)
		reviewed = fs.String("reviewed", "", reviewedUsage)
	}
	if which == "archive" {
		until = fs.Uint64("until", 0, "last stream sequence to archive (0: the newest snapshot's)")
		segment = fs.Int("segment-messages", projector.DefaultSegmentMessages, "messages per segment file")
	}
	if code, ok := cmd.parse(fs, args); !ok {
		return code
	}
	if *dir == "" {
		return cmd.usageError(fs, "--dir is required")
	}
	if *within <= 0 {
		return cmd.usageError(fs, "--within must be positive")
	}
	var trust *signing.KeySet
	var reviewedSeqs []uint64
	if which == "trim" {
		var err error
		if trust, err = vf.keys(); err != nil {
			return cmd.usageError(fs, err.Error())
		}
		if reviewedSeqs, err = parseReviewed(*reviewed); err != nil {
			return cmd.usageError(fs, err.Error())
		}
	}
	layout, err := streams.New(streams.Config{Bucket: *bucket, Prefix: c.prefix})
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate:", err)
		return 1
	}
	nc, err := c.connect("spendgate-audit-" + which)
	if err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %v\n", err)
		return 1
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate:", err)
		return 1
	}
	ctx, cancel := offlineContext(*within)
	defer cancel()
	if which == "trim" {
		res, err := projector.Trim(ctx, js, layout, *dir, append(vf.checkOptions(trust), projector.WithReviewed(reviewedSeqs...))...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "spendgate: audit trim:", err)
			return 1
		}
		fmt.Printf("trimmed below snapshot %s (seq %d): %d messages in the stream, %d before\n", res.Snapshot.Name, res.Snapshot.Seq, res.After, res.Before)
		fmt.Printf("kept a copy of the snapshot in %s: keep it with the archive; a replica on the trimmed stream needs a snapshot to start (spendgate snapshot --restore %s puts it back)\n", res.SnapshotFile, res.SnapshotFile)

		return 0
	}
	opts := projector.ArchiveOptions{Until: *until, SegmentMessages: *segment}
	if isTerminal(os.Stderr) {
		opts.Progress = terminalProgress(os.Stderr, "audit archive: archived to")
		defer fmt.Fprint(os.Stderr, "\r\033[K")
	}
	info, err := projector.Archive(ctx, js, layout, *dir, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate: audit archive:", err)
		return 1
	}
	fmt.Printf("archive %s: %d segments, seq %d..%d, %d messages\n", *dir, info.Segments, info.First, info.Last, info.Messages)
	return 0
}
