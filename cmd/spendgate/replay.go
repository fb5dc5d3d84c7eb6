package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// timeExample is the RFC 3339 time every time flag's error shows.
const timeExample = "2026-11-30T12:00:00Z"

// parseTimeFlag parses the value of --name as an RFC 3339 time; "" is the
// zero time. Its error names the flag and the expected format.
func parseTimeFlag(name, value string) (time.Time, error) {
	if value == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, value)
	if err != nil {
		return time.Time{}, fmt.Errorf("--%s %q: want an RFC 3339 time like %s", name, value, timeExample)
	}
	return t, nil
}

// replayFlags are the flags of every command that replays the book of
// record: those of audit check, plus a selection by opening time and scope.
type replayFlags struct {
	client   clientFlags
	bucket   string
	from, to string
	scopes   multiFlag
	archive  string
	tenant   string
	verify   verifyFlags
	// withinFlag is --within, the deadline of the replay.
	withinFlag *time.Duration
}

func (r *replayFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.archive, "archive", "", "read the archive in this directory (spendgate audit archive) before the stream")
	r.client.register(fs)
	fs.StringVar(&r.bucket, "bucket", streams.DefaultBucket, "ledger bucket name")
	fs.StringVar(&r.from, "from", "", "only reservations opened at or after this RFC 3339 time")
	fs.StringVar(&r.to, "to", "", "only reservations opened before this RFC 3339 time")
	fs.Var(&r.scopes, "scope", "only reservations admitted in this scope KIND:ID (repeatable: any of them); a tenant's as TENANT/KIND:ID, or KIND:ID with --tenant")
	fs.StringVar(&r.tenant, "tenant", "", "only this tenant's reservations")
	r.verify.register(fs)
	r.withinFlag = withinFlag(fs, offlineWithin)
}

// filter validates the selection flags into a report.Filter; the error
// is a usage error.
func (r *replayFlags) filter() (report.Filter, error) {
	var f report.Filter
	var err error
	if *r.withinFlag <= 0 {
		return f, errors.New("--within must be positive")
	}
	if f.From, err = parseTimeFlag("from", r.from); err != nil {
		return f, err
	}
	if f.To, err = parseTimeFlag("to", r.to); err != nil {
		return f, err
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		return f, fmt.Errorf("--from %s is not before --to %s", r.from, r.to)
	}
	if r.tenant != "" {
		if err := events.ValidateTenant(r.tenant); err != nil {
			return f, fmt.Errorf("--tenant: %v", err)
		}
		f.OneTenant, f.Tenant = true, r.tenant
	}
	for _, s := range r.scopes {
		var sc events.Scope
		var err error
		if r.tenant != "" {
			// With --tenant, scopes as the tenant names them.
			sc, err = events.ParseScope(s)
			sc = events.TenantScope(r.tenant, sc)
		} else {
			sc, err = events.ParseStoredScope(s)
		}
		if err != nil {
			return f, fmt.Errorf("--scope %q: %v", s, err)
		}
		f.Scopes = append(f.Scopes, sc)
	}
	return f, nil
}

// reader connects and returns a report reader over the ledger (a verified
// replay, through the archive if --archive names one), a context
// that ends on SIGINT or SIGTERM (a replay has no fixed deadline: it is
// as long as the book), and the function that releases both.
func (r *replayFlags) reader(name string) (*report.Reader, context.Context, func(), error) {
	layout, err := streams.New(streams.Config{Bucket: r.bucket, Prefix: r.client.prefix})
	if err != nil {
		return nil, nil, nil, err
	}
	trust, err := r.verify.keys()
	if err != nil {
		return nil, nil, nil, err
	}
	nc, err := r.client.connect("spendgate-" + name)
	if err != nil {
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	ctx, stop := offlineContext(*r.withinFlag)
	p := projector.New(js, layout, r.verify.projectorOptions(trust)...)
	if r.archive != "" {
		if _, err := p.UseArchive(r.archive); err != nil {
			stop()
			nc.Close()
			return nil, nil, nil, err
		}
	}
	rd := report.NewReader(js, layout, p)
	return rd, ctx, func() {
		stop()
		nc.Close()
		printDenialsSkipped(name, rd.DenialsSkipped())
	}, nil
}

// printDenialsSkipped says on stderr how many denial records a replay left
// out, by reason (none: nothing): records no trusted key signed.
func printDenialsSkipped(name string, skipped map[signing.Reason]uint64) {
	var total uint64
	var parts []string
	for _, reason := range signing.Reasons {
		if n := skipped[reason]; n > 0 {
			total += n
			parts = append(parts, fmt.Sprintf("%s %d", reason, n))
		}
	}
	if total > 0 {
		fmt.Fprintf(os.Stderr, "spendgate: %s: %d denial records not counted: not signed by a trusted key, or replayed (%s)\n", name, total, strings.Join(parts, ", "))
	}
}
