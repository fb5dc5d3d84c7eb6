package main

import (
	"fmt"
	"github.com/spendgate/spendgate/events"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

var (
	auditCommand = command{
		name:     "spendgate audit",
		synopsis: "check|keys|balances|export|archive|trim [flags]",
		about: `Replays the book of record for finance:

  check      replay the book and reconcile it with the live balances, to the
             last digit (exit 1 if they differ); with --trusted-keys also
             verify every revision's signature
  keys       which signing key wrote which revisions
  balances   totals per budget period as CSV, optionally as of a time
  export     one row per reservation, as CSV or JSON Lines
  archive    copy the stream's old revisions to hash-chained segment files
  trim       drop from the stream what the archive and a verified snapshot cover`,
	}
	auditCheckCommand = command{
		name:     "spendgate audit check",
		synopsis: "[--from-snapshot] [--archive DIR] [--window D] [--expired-window D] (--trusted-keys KEYS | --unverified) [--reviewed SEQ,...] [--within D] [--nats-url URL] [--bucket NAME]",
		about: `Replays the book of record and reconciles it with the live balances. With
--trusted-keys (public keys, or files of them, comma-separated) it also
verifies every revision's signature and skips, as a replica does, any
revision that is unsigned, signed by another key, badly signed, replayed,
malformed or off its key's chain, listing each with its sequence. Exit
status 1 if anything was skipped (but the --reviewed sequences) or replay
and live differ.
With --from-snapshot it starts from the newest ledger snapshot (checked
against the stream) and replays only the tail after it. Memory follows what
is open: a closed reservation is forgotten --window after its close
(--expired-window for an expired one); 0 keeps everything.`,
	}
	auditKeysCommand = command{
		name:     "spendgate audit keys",
		synopsis: "[--archive DIR] [--within D] [--nats-url URL] [--bucket NAME]",
		about: `Lists every key that signed revisions of the ledger stream, with the first
and last stream sequence it signed and how many ("unsigned" for revisions
without a signature), trusted or not: it says, for example, the last
sequence of a key being retired. Each signature is checked against the key
it names; revisions whose signature that key did not make are listed apart,
as "bad-signature:<key>", and never counted as the key's. Whether a key may
sign is what audit check verifies. A trimmed stream needs
--archive DIR: the archive is read first, then the stream after it.`,
	}
	auditBalancesCommand = command{
		name:     "spendgate audit balances",
		synopsis: "[--at RFC3339] [--decimal point|comma] [--archive DIR] (--trusted-keys KEYS | --unverified) [--within D] [--nats-url URL] [--bucket NAME]",
		about: `Writes the totals of every budget period as CSV on standard output, as of
now or of --at. A budget defined but not used in its period instance at
--at (or now) gets a row of zeros. --decimal comma writes 12,50 for 12.50
and separates the fields with semicolons, for a spreadsheet in a locale
with a decimal comma. Exit status 1 on any error, a failed
write included: a file that ends early is never reported as complete.`,
	}
)

// audit is spendgate audit check|keys|balances|export|archive|trim.
func audit(args []string) int {
	if len(args) > 0 && args[0] == "export" {
		return auditExport(args[1:])
	}
	if len(args) > 0 && (args[0] == "archive" || args[0] == "trim") {
		return auditArchive(args[0], args[1:])
	}
	if len(args) == 0 || (args[0] != "check" && args[0] != "balances" && args[0] != "keys") {
		return auditCommand.noSubcommand(args, "which audit? (check, balances, export, keys, archive or trim)")
	}
	cmd := auditCheckCommand
	switch args[0] {
	case "balances":
		cmd = auditBalancesCommand
	case "keys":
		cmd = auditKeysCommand
	}
	fs := newFlagSet("audit " + args[0])
	var c clientFlags
	c.register(fs)
	bucket := fs.String("bucket", streams.DefaultBucket, "ledger bucket name")
	var at, reviewed, decimal *string
	var fromSnap *bool
	var vf verifyFlags
	if args[0] == "balances" {
		at = fs.String("at", "", "balances as of this time (RFC 3339), default now")
		decimal = decimalFlag(fs)
	} else {
		fromSnap = fs.Bool("from-snapshot", false, "start from the newest ledger snapshot and replay only the tail")
	}
	archive := fs.String("archive", "", "read the archive in this directory (spendgate audit archive) before the stream")
	within := withinFlag(fs, offlineWithin)
	var window, expiredWindow *time.Duration
	if args[0] != "keys" {
		vf.register(fs)
		window = fs.Duration("window", projector.DefaultWindowClosed, "forget a settled or released reservation this long after its close (0: keep all)")
		expiredWindow = fs.Duration("expired-window", projector.DefaultWindowExpired, "forget an expired reservation this long after its expiry (0: keep all)")
	}
	if args[0] == "check" {
		reviewed = fs.String("reviewed", "", reviewedUsage)
	}
	if code, ok := cmd.parse(fs, args[1:]); !ok {
		return code
	}
	if *within <= 0 {
		return cmd.usageError(fs, "--within must be positive")
	}
	var reviewedSeqs []uint64
	if reviewed != nil {
		var err error
		if reviewedSeqs, err = parseReviewed(*reviewed); err != nil {
			return cmd.usageError(fs, err.Error())
		}
	}
	dec := report.DecimalPoint
	if decimal != nil {
		var err error
		if dec, err = report.ParseDecimal(*decimal); err != nil {
			return cmd.usageError(fs, "--decimal "+strconv.Quote(*decimal)+": want point or comma")
		}
	}
	var until time.Time
	if at != nil {
		t, err := parseTimeFlag("at", *at)
		if err != nil {
			return cmd.usageError(fs, err.Error())
		}
		if t.After(time.Now().Add(atFutureSlack)) {
			// Balances are known up to now: a time ahead of it (a typo of
			// the year) would show the periods then as idle budgets.
			return cmd.usageError(fs, fmt.Sprintf("--at %q is in the future; leave --at out for the balances now", *at))
		}
		until = t
	}
	var trust *signing.KeySet
	if args[0] != "keys" {
		var err error
		if trust, err = vf.keys(); err != nil {
			return cmd.usageError(fs, err.Error())
		}
	}
	layout, err := streams.New(streams.Config{Bucket: *bucket, Prefix: c.prefix})
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate:", err)
		return 1
	}
	nc, err := c.connect("spendgate-audit")
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
	// A replay is as long as the book: --within (30 minutes by default),
	// SIGINT or SIGTERM end it, and a read that stalls on a copy fails.
	ctx, cancel := offlineContext(*within)
	defer cancel()
	if args[0] == "keys" {
		var kopts []projector.CheckOption
		if *archive != "" {
			kopts = append(kopts, projector.WithArchive(*archive))
		}
		uses, err := projector.Signers(ctx, js, layout, kopts...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "spendgate: audit keys:", err)
			return 1
		}
		for _, u := range uses {
			key := u.Key
			switch {
			case u.BadSignature:
				key = "bad-signature:" + u.Key
			case key == "":
				key = "unsigned"
			}
			fmt.Printf("%s first=%d last=%d revisions=%d\n", key, u.First, u.Last, u.Revisions)
		}
		return 0
	}
	opts := []projector.CheckOption{projector.WithWindow(*window, *expiredWindow)}
	if *archive != "" {
		opts = append(opts, projector.WithArchive(*archive))
	}
	progress := isTerminal(os.Stderr)
	if args[0] == "check" {
		opts = append(opts, projector.WithReviewed(reviewedSeqs...))
		opts = append(opts, vf.checkOptions(trust)...)
		if progress {
			opts = append(opts, projector.WithProgress(terminalProgress(os.Stderr, "audit check: replayed")))
		}
		if *fromSnap {
			opts = append(opts, projector.WithFromSnapshot())
		}
		rep, err := projector.Check(ctx, js, layout, opts...)
		if progress {
			fmt.Fprint(os.Stderr, "\r\033[K")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "spendgate: audit check:", err)
			return 1
		}
		if _, err := fmt.Println(rep); err != nil {
			fmt.Fprintln(os.Stderr, "spendgate: audit check: write the report:", err)
			return 1
		}
		if !rep.OK() {
			return 1
		}
		return 0
	}
	p := projector.New(js, layout, vf.projectorOptions(trust)...)
	var st *projector.State
	if progress {
		opts = append(opts, projector.WithProgress(terminalProgress(os.Stderr, "audit balances: replayed")))
	}
	if !until.IsZero() {
		st, err = p.ReplayUntil(ctx, until, opts...)
	} else {
		st, err = p.CatchUp(ctx, opts...)
	}
	if progress {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate: audit balances:", err)
		return 1
	}
	now := until
	if now.IsZero() {
		now = time.Now()
	}
	balances := st.Balances()
	report.DefinedLimits(st, balances)
	report.DefinedZones(st, balances)
	balances = append(balances, report.IdleBalances(st, now)...)
	slices.SortFunc(balances, func(a, b projector.Balance) int { return strings.Compare(a.Key, b.Key) })
	retired := map[events.BudgetRef]time.Time{}
	for _, b := range st.Budgets() {
		if b.Retired {
			retired[b.Ref] = b.RetiredAt
		}
	}
	if err := writeBalances(os.Stdout, balances, retired, dec); err != nil {
		fmt.Fprintln(os.Stderr, "spendgate: audit balances: the CSV is incomplete:", err)
		return 1
	}
	return 0
}

// reviewedUsage is the help of --reviewed (audit check, audit trim).
const reviewedUsage = "stream sequences of skipped revisions already looked into, comma-separated: still listed, no longer a failure"

// parseReviewed reads --reviewed ("" gives none).
func parseReviewed(s string) ([]uint64, error) {
	if s == "" {
		return nil, nil
	}
	var seqs []uint64
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("--reviewed: %q is not a stream sequence", f)
		}
		seqs = append(seqs, n)
	}
	return seqs, nil
}

// parseTrusted reads --trusted-keys ("" gives nil: nothing verified).
func parseTrusted(spec string) (*signing.KeySet, error) {
	if spec == "" {
		return nil, nil
	}
	ks, err := signing.ParseKeys(spec)
	if err != nil {
		return nil, fmt.Errorf("--trusted-keys: %w", err)
	}
	return ks, nil
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// terminalProgress returns a progress function that rewrites one line of
// w at most twice a second: "<what> N of M revisions".
func terminalProgress(w io.Writer, what string) func(seq, last uint64) {
	var shown time.Time
	return func(seq, last uint64) {
		if time.Since(shown) < 500*time.Millisecond && seq != last {
			return
		}
		shown = time.Now()
		fmt.Fprintf(w, "\r\033[K%s %d of %d revisions", what, seq, last)
	}
}

// retiredAt is the retired_at column of budget ref: its retirement's time
// in UTC, "" for a live budget (or a retirement whose time is unknown).
func retiredAt(retired map[events.BudgetRef]time.Time, ref events.BudgetRef) string {
	at, ok := retired[ref]
	if !ok || at.IsZero() {
		return ""
	}
	return at.UTC().Format(time.RFC3339Nano)
}

// atFutureSlack is how far ahead of this machine's clock audit balances
// --at may be (the clocks of the server that stamps the revisions and of
// this machine may differ a little).
const atFutureSlack = time.Minute

// balanceColumns is the header of audit balances' CSV.
var balanceColumns = []string{"scope", "period", "instance", "unit", "limit", "spent", "reserved", "overrun", "open", "opened", "settled", "released", "expired", "late", "tz", "retired_at"}

// writeBalances writes balances as CSV, its decimals in d, and returns the first write or
// flush error: a finance export that ends early must not look complete.
// retired holds the retired budgets' retirement times (retired_at; empty
// for a live budget).
func writeBalances(out io.Writer, balances []projector.Balance, retired map[events.BudgetRef]time.Time, d report.Decimal) error {
	w := report.NewCSVWriter(out, d, balanceColumns, "limit", "spent", "reserved", "overrun")
	if err := w.Write(balanceColumns); err != nil {
		return err
	}
	for _, b := range balances {
		if err := w.Write([]string{string(b.Ref.Scope), string(b.Ref.Period), b.Ref.Instance, b.Unit,
			b.Limit.String(), b.Spent.String(), b.Reserved.String(), b.Overrun.String(),
			strconv.FormatInt(b.Open, 10), strconv.FormatInt(b.Opened, 10), strconv.FormatInt(b.Settled, 10),
			strconv.FormatInt(b.Released, 10), strconv.FormatInt(b.Expired, 10), strconv.FormatInt(b.Late, 10),
			strings.Join(b.Zones, " "), retiredAt(retired, b.Ref.Budget())}); err != nil {
			return err
		}
	}
	w.Flush()
	return w.Error()
}
