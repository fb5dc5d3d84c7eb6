package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/internal/config"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

var snapshotCommand = command{
	name:     "spendgate snapshot",
	synopsis: "--trusted-keys KEYS --signing-key FILE | --unverified [--list | --restore FILE] [--nats-url URL] [--bucket NAME] [--within 10m]",
	about: `Writes a snapshot of the ledger's book now, into the object store bucket
<bucket>_snapshots, and prints it as JSON ({"name","seq","size"}). It folds
the stream the way a starting replica does (from the newest snapshot a
trusted key signed, then the tail), verifying every revision against
--trusted-keys as a replica does, and signs what it writes with
--signing-key (a key the ledger trusts to write now: replicas load only
snapshots a trusted key signed, so a retired, distrusted or unknown key is
refused and nothing is written). A snapshot at the same position that is
stored already and verifies is kept, never written over: the reply then
says "kept": true. It needs no running replica. Replicas also write one
every --snapshot-revisions revisions or --snapshot-interval and when they
stop (see serve). With --list it prints the stored snapshots, newest first,
one JSON object a line. With --restore FILE it puts a copy of a snapshot
back into the bucket (the one audit trim keeps in its archive directory,
which a replica on a trimmed stream needs to start), after checking its
digest and that a key of --trusted-keys signed it; it prints the snapshot
with "restored": true.`,
}

// snapshotCmd is spendgate snapshot.
func snapshotCmd(args []string) int {
	fs := newFlagSet("snapshot")
	var c clientFlags
	c.register(fs)
	bucket := fs.String("bucket", streams.DefaultBucket, "ledger bucket name")
	list := fs.Bool("list", false, "list the stored snapshots instead of writing one")
	restore := fs.String("restore", "", "put this snapshot file (a copy audit trim kept) back into the bucket instead of writing one")
	timeout := fs.Duration("within", 10*time.Minute, "how long the fold and the write may take")
	var vf verifyFlags
	vf.register(fs)
	keyFile := fs.String("signing-key", "", "nkey seed file of a key the ledger trusts: signs the snapshot (with the embedded server ./spendgate-data/signing.nk)")
	var logging config.Logging
	logging.AddFlags(fs)
	if code, ok := snapshotCommand.parse(fs, args); !ok {
		return code
	}
	if *timeout <= 0 {
		return snapshotCommand.usageError(fs, "--within must be positive")
	}
	if *list && *restore != "" {
		return snapshotCommand.usageError(fs, "--list and --restore exclude each other")
	}
	var trust *signing.KeySet
	var signer *signing.Signer
	if !*list {
		var err error
		if trust, err = vf.keys(); err != nil {
			return snapshotCommand.usageError(fs, err.Error())
		}
		switch {
		case *restore != "":
			if *keyFile != "" {
				return snapshotCommand.usageError(fs, "--restore puts a snapshot back as it was signed: --signing-key does not apply")
			}
		case *keyFile == "" && !vf.unverified:
			return snapshotCommand.usageError(fs, "--signing-key is required: replicas load only a snapshot signed by a key the ledger trusts")
		case *keyFile != "":
			if signer, err = signing.LoadSigner(*keyFile); err != nil {
				return snapshotCommand.usageError(fs, "--signing-key: "+err.Error())
			}
		}
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "spendgate: snapshot:", err)
		return exitError
	}
	nc, err := c.connect("spendgate-snapshot")
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	layout, err := streams.New(streams.Config{Bucket: *bucket, Prefix: c.prefix})
	if err != nil {
		return fail(err)
	}
	// The lane count is the stream's, whatever the flags say.
	s, err := js.Stream(ctx, layout.StreamName())
	if err != nil {
		return fail(fmt.Errorf("ledger stream %s: %w", layout.StreamName(), err))
	}
	lanes, err := streams.RecordedLanes(s.CachedInfo().Config)
	if err != nil {
		return fail(err)
	}
	if layout, err = streams.New(streams.Config{Bucket: *bucket, Prefix: c.prefix, Lanes: lanes, Replicas: s.CachedInfo().Config.Replicas}); err != nil {
		return fail(err)
	}
	enc := json.NewEncoder(os.Stdout)
	if *restore != "" {
		out, err := restoreSnapshot(ctx, js, layout, *restore, trust)
		if err != nil {
			return fail(err)
		}
		if err := enc.Encode(out); err != nil {
			return fail(err)
		}
		return exitOK
	}
	if *list {
		snaps, err := ledger.ListSnapshots(ctx, js, layout)
		if err != nil {
			return fail(err)
		}
		for _, s := range snaps {
			if err := enc.Encode(snapshotJSON(s)); err != nil {
				return fail(err)
			}
		}
		return exitOK
	}
	if _, err := streams.EnsureSnapshots(ctx, js, layout); err != nil {
		return fail(err)
	}
	lopts := []ledger.Option{ledger.WithSnapshotEvery(0, 0), ledger.WithLogger(logging.New(os.Stderr)), ledger.WithSigner(signer)}
	if vf.unverified {
		lopts = append(lopts, ledger.WithUnverified())
	} else {
		lopts = append(lopts, ledger.WithTrust(trust))
	}
	l, err := ledger.New(ctx, nc, js, layout, lopts...)
	if err != nil {
		return fail(err)
	}
	// The read models travel in snapshots: fold them as a replica does.
	if _, _, err := replica.AddReadModels(l, js, layout, logging.New(os.Stderr)); err != nil {
		return fail(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()
	defer func() { stopRun(); <-done }()
	select {
	case <-l.Ready():
	case err := <-done:
		done <- err
		return fail(fmt.Errorf("folding the stream: %w", err))
	case <-ctx.Done():
		return fail(fmt.Errorf("folding the stream: %w", ctx.Err()))
	}
	info, err := l.Snapshot(ctx)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (raise --within)", err)
		}
		return fail(err)
	}
	if err := enc.Encode(snapshotJSON(info)); err != nil {
		return fail(err)
	}
	return exitOK
}

// restoreSnapshot puts the snapshot in file back into layout's snapshot
// bucket, under the name its sequence gives it, once it checks (digest,
// body, and a signature by a key of trust; nil: --unverified).
func restoreSnapshot(ctx context.Context, js jetstream.JetStream, layout streams.Layout, file string, trust *signing.KeySet) (snapshotOut, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return snapshotOut{}, err
	}
	name, seq, err := projector.CheckSnapshotFile(data, layout.Bucket(), trust)
	if err != nil {
		return snapshotOut{}, fmt.Errorf("%s: %w", file, err)
	}
	store, err := streams.EnsureSnapshots(ctx, js, layout)
	if err != nil {
		return snapshotOut{}, err
	}
	info, err := store.PutBytes(ctx, name, data)
	if err != nil {
		return snapshotOut{}, fmt.Errorf("putting %s back: %w", name, err)
	}
	return snapshotOut{Name: name, Seq: seq, Size: info.Size, Restored: true}, nil
}

type snapshotOut struct {
	Name string `json:"name"`
	Seq  uint64 `json:"seq"`
	Size uint64 `json:"size"`
	// Restored: put back from a file (--restore).
	Restored bool `json:"restored,omitempty"`
	// Kept: a verified snapshot at this position was stored already.
	Kept bool `json:"kept,omitempty"`
}

func snapshotJSON(s ledger.SnapshotInfo) snapshotOut {
	return snapshotOut{Name: s.Name, Seq: s.Seq, Size: s.Size, Kept: s.Kept}
}
