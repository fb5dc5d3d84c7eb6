package streams

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
)

// Named limits.
const (
	// DefaultBucket is the ledger bucket's name.
	DefaultBucket = "spendgate"
	// DefaultPrefix is the service subject prefix.
	DefaultPrefix = "spendgate."
	// ServiceName is the NATS micro service name.
	ServiceName = "spendgate"
	// KeepRevisions is MaxMsgsPerSubject of the ledger stream: every
	// revision of every key is kept (-1 would break KV binding; 2^40 binds).
	KeepRevisions = int64(1) << 40
	// DuplicateWindow is the stream's Nats-Msg-Id dedupe window.
	DuplicateWindow = 10 * time.Minute
	// MaxMsgSize caps one revision in the stream. The NATS max payload
	// (1 MiB by default) is usually the tighter bound; a group commit whose
	// revision exceeds either is committed in parts.
	MaxMsgSize = 4 << 20
	// MaxBatch is the most keys (messages) in one atomic batch; the server
	// allows 1000. Txs over several lanes are grouped into batches up to
	// this.
	MaxBatch = 256
	// DefaultLanes is the number of commit lanes of a new ledger stream.
	DefaultLanes = 1
	// MaxLanes bounds Config.Lanes.
	MaxLanes = 1024
	// Compression is the ledger stream's storage compression: none. S2
	// (on from 47c3478 to b15a943) shrank the stream about 7x on disk
	// (BenchmarkDiskBytesPerReservation), but nats-server 2.15.2 could not
	// keep it across a crash: every SIGKILL of a node under writes left
	// that node's copy unreadable ("s2: corrupt input" on truncate or on
	// recreating the stream), and an R3 stream with two such copies lost
	// its quorum. An uncompressed stream stayed clean under the same
	// kills (the cluster fault test, internal/faulttest). Ensure sets it
	// on an existing S2 stream too (see Ensure for what the server does
	// with the blocks it already wrote).
	Compression = jetstream.NoCompression
	// MetadataLanes is the ledger stream's metadata key that records its
	// number of lanes; it is fixed when the stream is created.
	MetadataLanes = "spendgate_lanes"
)

// Config names the resources of one spendgate installation.
type Config struct {
	// Bucket is the ledger bucket name (stream KV_<Bucket>).
	Bucket string
	// Replicas of the ledger stream: 1 on the embedded server, 3 on a
	// production cluster.
	Replicas int
	// Prefix of every service subject, ending in '.'.
	Prefix string
	// Lanes is the number of commit lanes (default DefaultLanes): every
	// balance belongs to one lane, chosen by its scope, and the balances of
	// one lane are written together, one compare-and-set revision of the
	// lane key carrying every balance it changes. One lane folds every
	// concurrent Tx of a replica into one write; more lanes commit in
	// parallel, but a Tx whose balances span lanes costs an atomic batch.
	// It is recorded in the stream when the stream is created and can never
	// change (a balance must never move between lanes).
	Lanes int
	// Trimmable creates the ledger stream allowing purges, so that
	// history archived with spendgate audit archive can be dropped from it
	// (projector.Trim). Like Lanes it is fixed when the stream is created:
	// JetStream cannot lift a stream's deny-purge, and Ensure keeps an
	// existing stream's setting.
	Trimmable bool
}

// DefaultConfig is the embedded single-server configuration.
func DefaultConfig() Config {
	return Config{Bucket: DefaultBucket, Replicas: 1, Prefix: DefaultPrefix, Lanes: DefaultLanes}
}

func (c Config) withDefaults() Config {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Lanes == 0 {
		c.Lanes = DefaultLanes
	}
	return c
}

// Validate checks the configuration.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := events.ValidateToken("bucket", c.Bucket, 64); err != nil {
		return err
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		return fmt.Errorf("streams: replicas must be 1..5, got %d", c.Replicas)
	}
	if !strings.HasSuffix(c.Prefix, ".") || strings.ContainsAny(c.Prefix, " *>") || strings.HasPrefix(c.Prefix, ".") {
		return fmt.Errorf("streams: prefix %q must be dot-separated tokens ending in '.'", c.Prefix)
	}
	if c.Lanes < 1 || c.Lanes > MaxLanes {
		return fmt.Errorf("streams: lanes must be 1..%d, got %d", MaxLanes, c.Lanes)
	}
	return nil
}

// Layout is a validated Config with its builders.
type Layout struct{ c Config }

// New validates c and returns its layout.
func New(c Config) (Layout, error) {
	c = c.withDefaults()
	if err := c.Validate(); err != nil {
		return Layout{}, err
	}
	return Layout{c: c}, nil
}

// Default is the layout of DefaultConfig.
func Default() Layout { l, _ := New(DefaultConfig()); return l }

// Config returns the configuration.
func (l Layout) Config() Config { return l.c }

// StreamName is the ledger stream, KV_<bucket>.
func (l Layout) StreamName() string { return "KV_" + l.c.Bucket }

// Bucket is the ledger bucket name.
func (l Layout) Bucket() string { return l.c.Bucket }

// StreamConfig is the ledger stream's configuration.
func (l Layout) StreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:               l.StreamName(),
		Description:        "spendgate ledger: budget definitions and balances (in commit lanes); every revision is kept as the book of record",
		Subjects:           []string{l.KeyPrefix() + ">"},
		Retention:          jetstream.LimitsPolicy,
		MaxMsgsPerSubject:  KeepRevisions,
		MaxMsgs:            -1,
		MaxBytes:           -1,
		MaxAge:             0,
		MaxMsgSize:         MaxMsgSize,
		Storage:            jetstream.FileStorage,
		Replicas:           l.c.Replicas,
		Discard:            jetstream.DiscardNew,
		Duplicates:         DuplicateWindow,
		AllowRollup:        false,
		DenyDelete:         true,
		DenyPurge:          !l.c.Trimmable,
		AllowDirect:        true,
		AllowAtomicPublish: true,
		Compression:        Compression,
		Metadata:           map[string]string{MetadataLanes: strconv.Itoa(l.c.Lanes)},
	}
}

// Ensure creates or updates the ledger stream. It is idempotent and safe to
// run from every replica at start, at the same time. A stream that already
// has the layout's configuration is not updated, so replicas need no right
// to update it (roles). It never calls
// UpdateKeyValue, which would rebuild the stream without atomic publish.
// An existing stream must have the layout's number of lanes
// (ErrLanesMismatch otherwise): lanes are fixed when the stream is created.
// The stream is only created with a create-only request and only updated
// after its lane count was read back and matched, so two replicas starting
// at once with different lane counts cannot both succeed.
//
// A stream an older build created S2-compressed is updated to Compression
// (none). nats-server (2.15.2, measured by TestEnsure_UncompressesS2Stream)
// allows the update; each node keeps compressing the blocks it seals until
// it restarts, then writes uncompressed blocks, and never rewrites the
// compressed blocks it already has, which stay readable. So after the
// upgrade restart the nats-server nodes one at a time. If the update is
// refused (an identity that may not update the stream) Ensure fails with
// ErrCompressed, which says how to fix it.
func Ensure(ctx context.Context, js jetstream.JetStream, l Layout) (jetstream.Stream, error) {
	cfg := l.StreamConfig()
	// Right after a cluster forms, stream creation may fail with "no
	// suitable peers" for a moment, a stream another replica is creating
	// may answer "stream not found" or not at all: retry within
	// StartRetryFor (and ctx). A create that loses to another replica's
	// create goes round again to check that stream. A lane mismatch is
	// final.
	var s jetstream.Stream
	err := RetryStart(ctx, StartRetryFor, func(err error) bool {
		return errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) || isStoreFailed(err) || (IsTransient(err) && !errors.Is(err, ErrLanesMismatch))
	}, func(ctx context.Context) error {
		// Create first, as ensureStream does and for its reason: a read
		// of the stream that meets another replica's create in flight
		// goes unanswered (nats-server 2.15.2).
		created, err := js.CreateStream(ctx, cfg)
		if err == nil {
			if n, err := RecordedLanes(created.CachedInfo().Config); err != nil || n != l.c.Lanes {
				return fmt.Errorf("%w: stream %s created with lanes %q, configured %d", ErrLanesMismatch, cfg.Name, created.CachedInfo().Config.Metadata[MetadataLanes], l.c.Lanes)
			}
			s = created
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("streams: ensure %s: %w", cfg.Name, err)
		}
		// The stream exists with another configuration: its lanes must
		// be the layout's, and only then is it updated.
		have, exists, err := checkLanes(ctx, js, l)
		if err != nil {
			return err
		}
		if exists {
			// Deny-purge stays as the stream was created (see
			// Config.Trimmable).
			cfg.DenyPurge = have.CachedInfo().Config.DenyPurge
		}
		if exists && configured(have.CachedInfo().Config, cfg) {
			// Nothing to change: no update, so a replica needs no
			// permission to update the stream (roles: the update could
			// shorten the history).
			s = have
		} else if exists {
			s, err = js.UpdateStream(ctx, cfg)
			// An identity that may not update the stream gets no answer
			// at all (a permissions violation), so a compressed stream's
			// failed update says what is wrong whatever the cause (a
			// transient one is still retried: the cause stays wrapped).
			if err != nil && have.CachedInfo().Config.Compression != cfg.Compression {
				return fmt.Errorf("streams: ensure %s: %w: %w", cfg.Name, ErrCompressed, err)
			}
		} else {
			s, err = js.CreateStream(ctx, cfg)
		}
		if err != nil {
			return fmt.Errorf("streams: ensure %s: %w", cfg.Name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// SnapshotBucket is the object store bucket of the ledger's snapshots:
// <bucket>_snapshots ("spendgate_snapshots" by default).
//
// Why an object store and not a KV key: a snapshot holds what is live
// (budgets, balances, open reservations, the idempotency window), which
// grows with traffic to many megabytes; a KV value is one message, capped
// by the server's max payload (1 MiB by default), while an object is
// chunked (128 KiB chunks), carries its own SHA-256 digest, and is written
// and read as a stream. Snapshots are named by the stream sequence they
// cover (SnapshotName), so replicas writing at once never overwrite each
// other's with a different state.
func (l Layout) SnapshotBucket() string { return l.c.Bucket + "_snapshots" }

// SnapshotPrefix starts the name of every snapshot object.
const SnapshotPrefix = "snapshot-"

// SnapshotName is the object name of the snapshot covering seq: the
// sequence zero-padded to 20 digits, so names sort in sequence order.
func SnapshotName(seq uint64) string { return fmt.Sprintf("%s%020d", SnapshotPrefix, seq) }

// SnapshotSeq parses a SnapshotName.
func SnapshotSeq(name string) (uint64, bool) {
	if !strings.HasPrefix(name, SnapshotPrefix) || len(name) != len(SnapshotPrefix)+20 {
		return 0, false
	}
	seq, err := strconv.ParseUint(name[len(SnapshotPrefix):], 10, 64)
	return seq, err == nil
}

// FeedCheckpointName is the object, in the same bucket as the ledger's
// snapshots (and ignored by them), where feed relays write where the feed
// stands (package feed).
const FeedCheckpointName = "feed-checkpoint"

// SnapshotConfig is the snapshot bucket's configuration: file storage,
// the ledger's replicas, uncompressed (S2 is not kept across a crash by
// nats-server 2.15.2; see Compression). EnsureSnapshots turns S2 off on a
// bucket an older build created.
func (l Layout) SnapshotConfig() jetstream.ObjectStoreConfig {
	return jetstream.ObjectStoreConfig{
		Bucket:      l.SnapshotBucket(),
		Description: "spendgate ledger snapshots: the book at one stream sequence, so a replica folds only the tail",
		Storage:     jetstream.FileStorage,
		Replicas:    l.c.Replicas,
		Compression: Compression != jetstream.NoCompression,
	}
}

// EnsureSnapshots creates the snapshot bucket, or opens it if it exists
// with this configuration (idempotent). The writer of a snapshot calls it
// (the ledger's snapshot writer and the feed relay when they find no
// bucket, spendgate snapshot); Ensure does not, so a replica whose
// permissions do not cover the bucket still starts (it folds the whole
// stream and logs that it cannot read or write snapshots).
//
// A bucket that exists with another configuration (S2-compressed by an
// older build, another replica count, subjects someone widened) is
// updated, which under spendgate roles only the operator's identity may
// do: the replica role may create the bucket, never change it, since an
// update could make its stream capture other subjects (the endpoints,
// whose callers would read its acknowledgements as answers, or other
// roles' inboxes). If the update fails, the error is ErrSnapshotSubjects
// when the subjects are what differs.
func EnsureSnapshots(ctx context.Context, js jetstream.JetStream, l Layout) (jetstream.ObjectStore, error) {
	cfg := l.SnapshotConfig()
	store, err := js.CreateObjectStore(ctx, cfg)
	if err == nil {
		return store, nil
	}
	if !errors.Is(err, jetstream.ErrBucketExists) {
		return nil, fmt.Errorf("streams: ensure %s: %w", l.SnapshotBucket(), err)
	}
	// An identity that may not update gets no answer at all: bound the
	// wait, so that the check below still has time to say why.
	uctx, cancel := context.WithTimeout(ctx, snapshotUpdateWait)
	store, err = js.UpdateObjectStore(uctx, cfg)
	cancel()
	if err == nil {
		return store, nil
	}
	if cerr := CheckSnapshotBucket(ctx, js, l); errors.Is(cerr, ErrSnapshotSubjects) {
		return nil, cerr
	}
	return nil, fmt.Errorf("streams: ensure %s: it exists with another configuration, and updating it failed "+
		"(under spendgate roles only the operator's identity may: run spendgate snapshot once with it, or nats stream edit %s): %w",
		l.SnapshotBucket(), l.SnapshotStreamName(), err)
}

// snapshotUpdateWait bounds EnsureSnapshots' update of an existing bucket.
const snapshotUpdateWait = 10 * time.Second

// SnapshotStreamName is the name of the snapshot bucket's stream.
func (l Layout) SnapshotStreamName() string { return "OBJ_" + l.SnapshotBucket() }

// SnapshotSubjects are the subjects of the snapshot bucket's stream, and
// the only ones it may have: its objects' chunks and metadata.
func (l Layout) SnapshotSubjects() []string {
	b := l.SnapshotBucket()
	return []string{"$O." + b + ".C.>", "$O." + b + ".M.>"}
}

// ErrSnapshotSubjects: the snapshot bucket's stream has subjects besides
// its own (SnapshotSubjects), which only an update can give it. It would
// store and answer what is published to them: an endpoint's callers would
// read its acknowledgements as answers, another role's inbox would be
// stored where a replica login reads it. Replicas write no snapshot into
// it and log this at error level; repair it with the operator's identity
// (spendgate snapshot, or nats stream edit).
var ErrSnapshotSubjects = errors.New("streams: the snapshot bucket's stream captures subjects other than its own")

// CheckSnapshotBucket reads the snapshot bucket's stream and returns
// ErrSnapshotSubjects (wrapped, naming them) if its subjects are not
// exactly SnapshotSubjects; jetstream.ErrStreamNotFound (wrapped) if
// there is no bucket; the server's or the connection's error otherwise.
func CheckSnapshotBucket(ctx context.Context, js jetstream.JetStream, l Layout) error {
	s, err := js.Stream(ctx, l.SnapshotStreamName())
	if err != nil {
		return fmt.Errorf("streams: snapshot bucket %s: %w", l.SnapshotBucket(), err)
	}
	have, want := s.CachedInfo().Config.Subjects, l.SnapshotSubjects()
	if !slices.Equal(have, want) {
		return fmt.Errorf("%w: stream %s has %q, want %q; repair it with the operator's identity (spendgate snapshot, or nats stream edit %s --subjects)",
			ErrSnapshotSubjects, l.SnapshotStreamName(), have, want, l.SnapshotStreamName())
	}
	return nil
}

// ErrCompressed: the ledger stream is stored S2-compressed (created by an
// earlier build) and this identity could not update it to no compression
// (under roles, replicas may not update the ledger stream).
// Fix: update it once with an identity that may (one spendgate serve as
// the admin or the stream's creator, or nats stream edit KV_<bucket>
// setting compression to none), then restart the nats-server nodes one at
// a time; see docs/cluster-faults.md.
var ErrCompressed = errors.New("streams: the ledger stream is S2-compressed, which nats-server 2.15.2 does not keep across a crash; update it to no compression with an identity that may update the stream (see docs/cluster-faults.md)")

// ErrLanesMismatch: the ledger stream exists with another number of lanes
// than the layout's, or records none (a stream of an older layout).
var ErrLanesMismatch = errors.New("streams: ledger stream lanes differ from the configured lanes")

// checkLanes returns the ledger stream and whether it exists, and fails if
// it exists with other lanes than l's.
func checkLanes(ctx context.Context, js jetstream.JetStream, l Layout) (jetstream.Stream, bool, error) {
	s, err := js.Stream(ctx, l.StreamName())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("streams: ensure %s: %w", l.StreamName(), err)
	}
	if n, err := RecordedLanes(s.CachedInfo().Config); err != nil || n != l.c.Lanes {
		have := "none (a stream written by an older layout)"
		if err == nil {
			have = strconv.Itoa(n)
		}
		return s, true, fmt.Errorf("%w: stream %s has %s, configured %d", ErrLanesMismatch, l.StreamName(), have, l.c.Lanes)
	}
	return s, true, nil
}

// configured reports whether a stream's configuration have already holds
// every setting of want that Ensure sets (the server adds defaults and
// metadata of its own).
func configured(have, want jetstream.StreamConfig) bool {
	for k, v := range want.Metadata {
		if have.Metadata[k] != v {
			return false
		}
	}
	return have.Description == want.Description && slices.Equal(have.Subjects, want.Subjects) &&
		have.Retention == want.Retention && have.MaxMsgsPerSubject == want.MaxMsgsPerSubject &&
		have.MaxMsgs == want.MaxMsgs && have.MaxBytes == want.MaxBytes && have.MaxAge == want.MaxAge &&
		have.MaxMsgSize == want.MaxMsgSize && have.Storage == want.Storage && have.Replicas == want.Replicas &&
		have.Discard == want.Discard && have.Duplicates == want.Duplicates && have.AllowRollup == want.AllowRollup &&
		have.DenyDelete == want.DenyDelete && have.DenyPurge == want.DenyPurge && have.AllowDirect == want.AllowDirect &&
		have.AllowAtomicPublish == want.AllowAtomicPublish && have.Compression == want.Compression
}

// RecordedLanes returns the lane count a ledger stream's configuration
// records (ErrLanesMismatch if it records none or an invalid one): what a
// reader such as the auditor, which did not create the stream, must use.
func RecordedLanes(cfg jetstream.StreamConfig) (int, error) {
	have := cfg.Metadata[MetadataLanes]
	n, err := strconv.Atoi(have)
	if err != nil || n < 1 || n > MaxLanes {
		return 0, fmt.Errorf("%w: stream %s records lanes %q", ErrLanesMismatch, cfg.Name, have)
	}
	return n, nil
}

// KeyPrefix is "$KV.<bucket>.".
func (l Layout) KeyPrefix() string { return "$KV." + l.c.Bucket + "." }

// Subject returns the stream subject of a key.
func (l Layout) Subject(key string) string { return l.KeyPrefix() + key }

// KeyOf returns the key of a stream subject, or false.
func (l Layout) KeyOf(subject string) (string, bool) {
	return strings.CutPrefix(subject, l.KeyPrefix())
}

// errNoSuitablePeers is JetStream's 10005, seen while a cluster forms.
const errNoSuitablePeers jetstream.ErrorCode = 10005

// Key families.
const (
	budgetFamily  = "budget"
	balanceFamily = "balance"
	laneFamily    = "lane"
	pricingFamily = "pricing"
	defaultFamily = "default"
)

// TrustKey is the key of the ledger's trust revisions: the public keys
// that may sign its revisions (events.TrustRevision).
const TrustKey = "trust"

// IsTrustKey reports whether key is the trust key.
func IsTrustKey(key string) bool { return key == TrustKey }

// TrustKeyFilter matches the trust key's subject.
func (l Layout) TrustKeyFilter() string { return l.KeyPrefix() + TrustKey }

// DefaultKey is "default.<kind>.<period>": the key of the default budget of
// a scope kind for a period.
func DefaultKey(kind string, p events.Period) string {
	return defaultFamily + "." + kind + "." + string(p)
}

// IsDefaultKey reports whether key is a default budget key.
func IsDefaultKey(key string) bool { return strings.HasPrefix(key, defaultFamily+".") }

// PricingKey is "pricing.<model>": the key of a model's prices (a model
// name may hold '.', so the key may span several subject tokens; see
// events.ValidateModel).
func PricingKey(model string) string { return pricingFamily + "." + model }

// IsPricingKey reports whether key is a pricing key.
func IsPricingKey(key string) bool { return strings.HasPrefix(key, pricingFamily+".") }

// PricingModel returns the model of a pricing key.
func PricingModel(key string) string { return strings.TrimPrefix(key, pricingFamily+".") }

// BudgetKey is "budget.<kind>.<id>.<period>", with ".<unit>" for a budget
// defined alongside another of the other kind in the same period
// (events.BudgetRef.Unit).
func BudgetKey(b events.BudgetRef) string {
	k := budgetFamily + "." + b.Scope.Kind() + "." + b.Scope.ID() + "." + string(b.Period)
	if b.Unit != "" {
		k += "." + b.Unit
	}
	return k
}

// BalanceKey is "balance.<kind>.<id>.<period>.<instance>": the name of a
// balance in the book and in events. It is not a KV key: a balance's
// revisions live in its lane (LaneKey).
//
// Every transaction asks for the keys of its balances several times (to
// group, to decide, to fold), so the keys are cached: a fixed table of
// immutable entries, looked up without a lock, where a newer key may
// evict an older one that hashes to the same slot (it is then built
// again). Equal refs give equal keys whether cached or not.
func BalanceKey(b events.BalanceRef) string {
	var h maphash.Hash
	h.SetSeed(balanceKeySeed)
	h.WriteString(string(b.Scope))
	_ = h.WriteByte(0)
	h.WriteString(string(b.Period))
	_ = h.WriteByte(0)
	h.WriteString(b.Instance)
	_ = h.WriteByte(0)
	h.WriteString(b.Unit)
	slot := &balanceKeys[h.Sum64()%uint64(len(balanceKeys))]
	if e := slot.Load(); e != nil && e.ref == b {
		return e.key
	}
	k := balanceKey(b)
	slot.Store(&balanceKeyEntry{ref: b, key: k})
	return k
}

// balanceKey builds BalanceKey's key.
func balanceKey(b events.BalanceRef) string {
	k := balanceFamily + "." + b.Scope.Kind() + "." + b.Scope.ID() + "." + string(b.Period) + "." + b.Instance
	if b.Unit != "" {
		// A budget alongside another in the same period (BudgetRef.Unit).
		k += "." + b.Unit
	}
	return k
}

type balanceKeyEntry struct {
	ref events.BalanceRef
	key string
}

var (
	balanceKeySeed = maphash.MakeSeed()
	// balanceKeys is BalanceKey's cache: 8,192 slots (64 KB of pointers,
	// at most as many entries).
	balanceKeys [8192]atomic.Pointer[balanceKeyEntry]
)

// Lanes returns the number of commit lanes.
func (l Layout) Lanes() int { return l.c.Lanes }

// LaneKey is the KV key of the lane that holds balance b: "lane.<n>", n the
// FNV-1a hash of b's scope modulo the number of lanes, so every period of
// one scope shares a lane.
func (l Layout) LaneKey(b events.BalanceRef) string {
	if l.c.Lanes <= 1 {
		return laneNames[0]
	}
	// FNV-1a, 32 bits (hash/fnv's New32a, without its allocations).
	h := uint32(2166136261)
	for i := 0; i < len(b.Scope); i++ {
		h ^= uint32(b.Scope[i])
		h *= 16777619
	}
	return laneNames[h%uint32(l.c.Lanes)]
}

// laneNames[n] is "lane.<n>", for every lane a layout can have.
var laneNames = func() (names [MaxLanes]string) {
	for n := range names {
		names[n] = laneFamily + "." + strconv.Itoa(n)
	}
	return names
}()

// LaneKeysFilter matches every lane key ("$KV.<bucket>.lane.>").
func (l Layout) LaneKeysFilter() string { return l.KeyPrefix() + laneFamily + ".>" }

// IsBudgetKey reports whether key is a budget definition key.
func IsBudgetKey(key string) bool { return strings.HasPrefix(key, budgetFamily+".") }

// IsBalanceKey reports whether key names a balance (see BalanceKey).
func IsBalanceKey(key string) bool { return strings.HasPrefix(key, balanceFamily+".") }

// IsLaneKey reports whether key is a lane key.
func IsLaneKey(key string) bool { return strings.HasPrefix(key, laneFamily+".") }

// HasLane reports whether key is one of this layout's lane keys exactly
// ("lane.<n>", n below Lanes, in its canonical spelling).
func (l Layout) HasLane(key string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(key, laneFamily+"."))
	return IsLaneKey(key) && err == nil && n >= 0 && n < max(l.c.Lanes, 1) && laneNames[n] == key
}

// Service subjects, under the prefix.
const (
	EndpointAdmit      = "admit"
	EndpointSettle     = "settle"
	EndpointRelease    = "release"
	EndpointVoid       = "void"
	EndpointBudgetPut  = "budget.put"
	EndpointBudgetGet  = "budget.get"
	EndpointBudgetList = "budget.list"
	// EndpointBudgetRetire retires a budget for good
	// (events.BudgetRetireRequest).
	EndpointBudgetRetire = "budget.retire"
	// EndpointPricingPut, EndpointPricingGet and EndpointPricingList
	// manage the pricing table.
	EndpointPricingPut  = "pricing.put"
	EndpointPricingGet  = "pricing.get"
	EndpointPricingList = "pricing.list"
	// EndpointAdmitBatch, EndpointSettleBatch and EndpointReleaseBatch
	// take many requests of their kind in one message
	// (events.BatchRequest) and answer each on its own.
	EndpointAdmitBatch   = "admit.batch"
	EndpointSettleBatch  = "settle.batch"
	EndpointReleaseBatch = "release.batch"
	// EndpointBatch takes admits, settles and releases mixed in one
	// message, each item an object naming its endpoint
	// ({"admit":{...}}), and answers each on its own: what a client
	// whose callers admit and settle at once sends as one message.
	EndpointBatch = "batch"
	// EndpointReport answers spend reports from a replica's maintained
	// aggregate.
	EndpointReport = "report"
	// EndpointKeyedBudgetPut and EndpointKeyedPricingPut are budget.put
	// and pricing.put on behalf of an API key (events.KeyedRequest): the
	// replica answers them only for an enabled key with admin access, in
	// the key's tenant. The gateway's HTTP API sends them; under spendgate
	// roles the gateway may publish these and not the plain puts, so its
	// login alone changes no budget and no price.
	EndpointKeyedBudgetPut  = "keyed.budget.put"
	EndpointKeyedPricingPut = "keyed.pricing.put"
	// EndpointKeyedBudgetRetire is budget.retire on behalf of an API key
	// with admin access, as the keyed puts are.
	EndpointKeyedBudgetRetire = "keyed.budget.retire"
)

// KeyedEndpoints are the endpoints on behalf of an API key, which have no
// tenant subject (the key names its tenant).
var KeyedEndpoints = []string{EndpointKeyedBudgetPut, EndpointKeyedPricingPut, EndpointKeyedBudgetRetire}

// Endpoint returns the subject of an endpoint ("spendgate.admit").
func (l Layout) Endpoint(name string) string { return l.c.Prefix + name }

// TenantToken is the subject token that starts the tenant endpoints:
// "<prefix>t.<tenant>.<endpoint>".
const TenantToken = "t"

// TenantEndpoint returns the subject of endpoint name for tenant
// ("spendgate.t.acme.admit"). A tenant account imports it under the plain
// Endpoint subject; the replica takes the tenant from it (TenantOf).
func (l Layout) TenantEndpoint(tenant, name string) string {
	return l.c.Prefix + TenantToken + "." + tenant + "." + name
}

// TenantEndpoints matches endpoint name of every tenant
// ("spendgate.t.*.admit"): the replica's subscription.
func (l Layout) TenantEndpoints(name string) string { return l.TenantEndpoint("*", name) }

// TenantPrefix is every subject of tenant ("spendgate.t.acme.>"): what the
// replica's account exports to the tenant's account.
func (l Layout) TenantPrefix(tenant string) string {
	return l.c.Prefix + TenantToken + "." + tenant + ".>"
}

// HeldToken is the subject token that starts the held endpoints:
// "<prefix>held.<endpoint>" and "<prefix>held.t.<tenant>.<endpoint>". Only
// they may close a held reservation (events.HeldRequestPrefix); under
// spendgate roles only the gateway and the admin may publish them, and no
// tenant account imports them.
const HeldToken = "held"

// HeldEndpoint returns the held subject of endpoint name
// ("spendgate.held.settle").
func (l Layout) HeldEndpoint(name string) string { return l.c.Prefix + HeldToken + "." + name }

// HeldTenantEndpoint returns tenant's held subject of endpoint name
// ("spendgate.held.t.acme.settle").
func (l Layout) HeldTenantEndpoint(tenant, name string) string {
	return l.HeldEndpoint(TenantToken + "." + tenant + "." + name)
}

// HeldTenantEndpoints matches the held endpoint name of every tenant
// ("spendgate.held.t.*.settle"): the replica's subscription.
func (l Layout) HeldTenantEndpoints(name string) string { return l.HeldTenantEndpoint("*", name) }

// HeldPrefix is what starts every held subject ("spendgate.held."): a
// client made with it (client.WithPrefix) calls the held endpoints, and
// with TenantToken, tenant and "." after it, a tenant's.
func (l Layout) HeldPrefix() string { return l.c.Prefix + HeldToken + "." }

// Unheld returns the subject a held subject stands for (the plain or
// tenant endpoint's) and true, or subject and false if it is not held.
func (l Layout) Unheld(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, l.HeldPrefix())
	if !ok {
		return subject, false
	}
	return l.c.Prefix + rest, true
}

// TenantOf returns the tenant of a subject of TenantEndpoints or
// HeldTenantEndpoints (the token after "<prefix>t." or
// "<prefix>held.t."), and false for any other subject.
func (l Layout) TenantOf(subject string) (string, bool) {
	subject, _ = l.Unheld(subject)
	rest, ok := strings.CutPrefix(subject, l.c.Prefix+TenantToken+".")
	if !ok {
		return "", false
	}
	t, _, ok := strings.Cut(rest, ".")
	if !ok || t == "" {
		return "", false
	}
	return t, true
}

// Prefix returns the service subject prefix.
func (l Layout) Prefix() string { return l.c.Prefix }

// IsConflict reports whether err is a compare-and-set conflict: a stale
// revision, 10071 (or 10164 on replicated streams). It is the one place that
// knows both codes.
func IsConflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return IsConflictCode(int(apiErr.ErrorCode))
	}
	return false
}

// jsErrCodeStreamWrongLastMsgID is nats-server's JSStreamWrongLastMsgIDErrF
// (an append whose Nats-Expected-Last-Msg-Id is not the stream's last
// message's id); nats.go has no exported name for it.
const jsErrCodeStreamWrongLastMsgID = 10070

// IsConflictCode reports whether a JetStream error code is a CAS conflict:
// the stream's last sequence, or its last message's id, is not the one
// the append expected.
func IsConflictCode(code int) bool {
	return code == int(jetstream.JSErrCodeStreamWrongLastSequence) ||
		code == int(jetstream.JSErrCodeStreamWrongLastSequenceConstant) ||
		code == jsErrCodeStreamWrongLastMsgID
}

// JetStream headers spendgate writes. The batch headers are nats-server
// 2.12's atomic batch publish (nats.go has no exported names for them yet);
// the expected-last-subject-sequence header is nats.go's.
const (
	// HeaderWriter names the replica that wrote a revision.
	HeaderWriter = "Spendgate-Writer"
	// HeaderBatchID, HeaderBatchSeq and HeaderBatchCommit make a run of
	// publishes one atomic batch.
	HeaderBatchID     = "Nats-Batch-Id"
	HeaderBatchSeq    = "Nats-Batch-Sequence"
	HeaderBatchCommit = "Nats-Batch-Commit"
	// HeaderExpectedLastSubjSeq is the compare-and-set of one publish.
	HeaderExpectedLastSubjSeq = jetstream.ExpectedLastSubjSeqHeader
)

// IsNoMessage reports whether a JetStream API error code is "no message
// found" (a get past the end of a subject).
func IsNoMessage(code jetstream.ErrorCode) bool { return code == jetstream.JSErrCodeMessageNotFound }

// DecodeMsgGetReply decodes the reply of a message get through the
// stream's leader ($JS.API.STREAM.MSG.GET.<stream>): the message, or found
// false when none matches; an API error the server answered otherwise.
// Headers that do not decode are dropped (no signature: the verifier
// decides).
func DecodeMsgGetReply(data []byte) (m *jetstream.RawStreamMsg, found bool, err error) {
	var resp struct {
		Error   *jetstream.APIError `json:"error,omitempty"`
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs,omitempty"`
			Data     []byte    `json:"data,omitempty"`
			Time     time.Time `json:"time"`
		} `json:"message,omitempty"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, false, fmt.Errorf("streams: message get reply: %w", err)
	}
	if resp.Error != nil {
		if IsNoMessage(resp.Error.ErrorCode) {
			return nil, false, nil
		}
		return nil, false, resp.Error
	}
	if resp.Message == nil {
		return nil, false, errors.New("streams: empty message get reply")
	}
	m = &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Sequence, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		if h, err := nats.DecodeHeadersMsg(resp.Message.Header); err == nil {
			m.Header = h
		}
	}
	return m, true, nil
}

// IsTooLarge reports whether err is a publish over the stream's or the
// server's maximum message size.
func IsTooLarge(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}

// MsgGetSubject is the JetStream API subject that reads one message of the
// layout's stream through its leader ("$JS.API.STREAM.MSG.GET.<stream>"),
// under js's API prefix, so a JetStream domain or a custom prefix is
// honoured.
func (l Layout) MsgGetSubject(js jetstream.JetStream) string {
	return apiPrefix(js) + "STREAM.MSG.GET." + l.StreamName()
}

// FeedMsgGetSubject is the JetStream API subject that reads one message of
// the feed stream through its leader ("$JS.API.STREAM.MSG.GET.<bucket>_feed"),
// under js's API prefix.
func (l Layout) FeedMsgGetSubject(js jetstream.JetStream) string {
	return apiPrefix(js) + "STREAM.MSG.GET." + l.FeedStreamName()
}

// DirectGetSubject is the JetStream API subject of a direct get from the
// layout's stream ("$JS.API.DIRECT.GET.<stream>"), under js's API prefix:
// any replica of the stream may answer it.
func (l Layout) DirectGetSubject(js jetstream.JetStream) string {
	return apiPrefix(js) + "DIRECT.GET." + l.StreamName()
}

// InfoSubject is the JetStream API subject of the layout's stream info
// ("$JS.API.STREAM.INFO.<stream>"), under js's API prefix. On a cluster
// more than one replica may answer it (see ledger's streamEnd).
func (l Layout) InfoSubject(js jetstream.JetStream) string {
	return apiPrefix(js) + "STREAM.INFO." + l.StreamName()
}

// apiPrefix is js's JetStream API prefix, ending in '.'.
func apiPrefix(js jetstream.JetStream) string {
	prefix := jetstream.DefaultAPIPrefix
	if js != nil {
		switch o := js.Options(); {
		case o.Domain != "":
			prefix = "$JS." + o.Domain + ".API."
		case o.APIPrefix != "":
			prefix = o.APIPrefix
		}
	}
	if !strings.HasSuffix(prefix, ".") {
		prefix += "."
	}
	return prefix
}

// The live event feed (package feed): a stream of its own, one message per
// event, in the ledger's commit order. Its layout is feed.v1.
const (
	// FeedVersion is the feed's subject token and schema version.
	FeedVersion = "v1"
	// FeedSchema is the "schema" of every feed message body.
	FeedSchema = "feed.v1"
	// FeedMaxMsgSize caps one feed message: one event and its envelope,
	// far below a whole lane revision.
	FeedMaxMsgSize = 256 << 10
	// HeaderFeedSourceSeq is the ledger stream sequence of the revision an
	// event was relayed from; HeaderFeedIndex the event's index in it.
	HeaderFeedSourceSeq = "Spendgate-Source-Seq"
	HeaderFeedIndex     = "Spendgate-Event-Index"
	// HeaderFeedType is the event type ("reservation.opened.v1").
	HeaderFeedType = "Spendgate-Event-Type"
	// HeaderFeedSchema is FeedSchema.
	HeaderFeedSchema = "Spendgate-Schema"
)

// FeedStreamName is the feed stream, "<bucket>_feed".
func (l Layout) FeedStreamName() string { return l.c.Bucket + "_feed" }

// FeedPrefix is "<prefix>feed.v1.", the start of every feed subject.
func (l Layout) FeedPrefix() string { return l.c.Prefix + "feed." + FeedVersion + "." }

// FeedFilter matches every feed subject ("spendgate.feed.v1.>").
func (l Layout) FeedFilter() string { return l.FeedPrefix() + ">" }

// AlertVersion is the version token of alert subjects.
const AlertVersion = "v1"

// HeaderAlertID carries an alert's id (events.Alert.ID) on its NATS
// message, so a consumer can drop a duplicate.
const HeaderAlertID = "Spendgate-Alert-Id"

// AlertSubject is the subject of a threshold alert of scope:
// "<prefix>alert.v1.<scope kind>.<scope id>", for example
// "spendgate.alert.v1.org.acme", or for a tenant's scope
// "<prefix>alert.v1.t.<tenant>.<scope kind>.<scope id>" (as FeedSubject
// does); subscribe to "spendgate.alert.v1.>" for every alert.
func (l Layout) AlertSubject(scope events.Scope) string {
	if tenant := scope.Tenant(); tenant != "" {
		local := scope.Local()
		return l.c.Prefix + "alert." + AlertVersion + "." + TenantToken + "." + tenant + "." + local.Kind() + "." + local.ID()
	}
	return l.c.Prefix + "alert." + AlertVersion + "." + scope.Kind() + "." + scope.ID()
}

// The alert stream (events.Alert): what budget owners receive, each alert
// stored once on a subject of its own, kept and replayable, for the webhook
// sink (a durable consumer) and anyone else. Every replica publishes the
// alerts its fold derives (and the blocking alerts of the admits it
// denies); two guards make that once:
//
//   - Nats-Msg-Id is the alert's id (AlertMsgID): two replicas publishing
//     within the dedupe window (AlertDuplicateWindow) get a Duplicate ack;
//   - each alert has its own subject (AlertMsgSubject, which encodes the
//     same id) and is published expecting that subject to be empty
//     (Nats-Expected-Last-Subject-Sequence: 0). A later duplicate - a
//     replica folding old revisions again after a restart, hours or weeks
//     later, past any dedupe window - is refused (10071) and changes
//     nothing, for as long as the stream keeps the alert (AlertMaxAge,
//     longer than any period instance but a lifetime).
//
// So the dedupe window need not cover a period: it only makes the
// concurrent publishes of the replicas cheap duplicates instead of refused
// ones.
const (
	// AlertMaxAge is how long the alert stream keeps an alert.
	AlertMaxAge = 400 * 24 * time.Hour
	// AlertDuplicateWindow is the alert stream's Nats-Msg-Id window.
	AlertDuplicateWindow = time.Hour
	// AlertMaxMsgSize caps one alert message.
	AlertMaxMsgSize = 16 << 10
)

// AlertStreamName is the alert stream, "<bucket>_alerts".
func (l Layout) AlertStreamName() string { return l.c.Bucket + "_alerts" }

// AlertFilter matches every alert subject ("spendgate.alert.v1.>").
func (l Layout) AlertFilter() string { return l.c.Prefix + "alert." + AlertVersion + ".>" }

// TenantAlertFilter matches the alert subjects of tenant's budgets
// ("spendgate.alert.v1.t.acme.>").
func (l Layout) TenantAlertFilter(tenant string) string {
	return l.c.Prefix + "alert." + AlertVersion + "." + TenantToken + "." + tenant + ".>"
}

// AlertMsgSubject is the subject of alert a: its scope's AlertSubject,
// then its period, period instance, unit ("_" for none), what it reports
// (the threshold with "_" for its point, "0_8", or "blocking") and its arm
// generation: "spendgate.alert.v1.org.acme.month.2026-12._.0_8.0". One
// alert, one subject (see the alert stream above); subscribe to
// "spendgate.alert.v1.org.acme.>" for a scope's alerts.
func (l Layout) AlertMsgSubject(a events.Alert) string {
	what := "blocking"
	if a.Kind != events.AlertBlocking && a.Threshold != nil {
		what = a.Threshold.String()
	}
	b := a.Balance
	return l.AlertSubject(b.Scope) + "." + alertToken(string(b.Period)) + "." + alertToken(b.Instance) + "." +
		alertToken(b.Unit) + "." + alertToken(what) + "." + strconv.FormatUint(a.Arm, 10)
}

// alertToken makes s one subject token: "." and the characters a token
// may not hold become "_", "" is "_".
func alertToken(s string) string {
	if s == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '.', '*', '>', ' ', '\t', '\r', '\n':
			return '_'
		}
		return r
	}, s)
}

// AlertStreamConfig is the alert stream's configuration: every alert
// subject, kept AlertMaxAge, deduplicated over AlertDuplicateWindow,
// stored and replicated like the ledger stream.
func (l Layout) AlertStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        l.AlertStreamName(),
		Description: "spendgate alerts (alert.v1): threshold and blocking alerts of budgets, once each; read by the webhook sink",
		Subjects:    []string{l.AlertFilter()},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      AlertMaxAge,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		MaxMsgSize:  AlertMaxMsgSize,
		Storage:     jetstream.FileStorage,
		Replicas:    l.c.Replicas,
		Discard:     jetstream.DiscardOld,
		Duplicates:  AlertDuplicateWindow,
		DenyDelete:  true,
		DenyPurge:   true,
		AllowDirect: true,
	}
}

// EnsureAlerts creates or updates the alert stream. Like Ensure it is
// idempotent and safe to run from every replica at once.
func EnsureAlerts(ctx context.Context, js jetstream.JetStream, l Layout) (jetstream.Stream, error) {
	return ensureStream(ctx, js, l.AlertStreamConfig())
}

// FeedSubject is the subject of one feed message:
// "<prefix>feed.v1.<event type>.<scope kind>.<scope id>", for example
// "spendgate.feed.v1.reservation.opened.v1.team.search". The event type
// spans three tokens (noun, verb, version), so a consumer filters by type
// with "spendgate.feed.v1.reservation.>" or by scope with
// "spendgate.feed.v1.*.*.*.team.search".
//
// A tenant's event carries the tenant in two more tokens, "t.<tenant>",
// before the scope as the tenant names it:
// "spendgate.feed.v1.reservation.opened.v1.t.acme.team.search". Its feed is
// "spendgate.feed.v1.*.*.*.t.acme.>" (TenantFeedFilter), which no
// untenanted event matches (those have two tokens after the type, a
// tenant's four).
func (l Layout) FeedSubject(t events.Type, scope events.Scope) string {
	if tenant := scope.Tenant(); tenant != "" {
		local := scope.Local()
		return l.FeedPrefix() + string(t) + "." + TenantToken + "." + tenant + "." + local.Kind() + "." + local.ID()
	}
	return l.FeedPrefix() + string(t) + "." + scope.Kind() + "." + scope.ID()
}

// TenantFeedConsumer is the one durable consumer of the feed stream a
// tenant may use: "t-<tenant>". Consumer names starting "t-" are reserved
// for tenants.
func TenantFeedConsumer(tenant string) string { return "t-" + tenant }

// TenantFeedFilter matches every feed subject of tenant's events
// ("spendgate.feed.v1.*.*.*.t.acme.>").
func (l Layout) TenantFeedFilter(tenant string) string {
	return l.FeedPrefix() + "*.*.*." + TenantToken + "." + tenant + ".>"
}

// DefaultFeedMaxAge is how long the feed keeps a message by default: a
// consumer may be away this long and still resume without missing an
// event. The ledger keeps every revision regardless; the feed is a copy.
const DefaultFeedMaxAge = 7 * 24 * time.Hour

// FeedOption changes the feed stream's configuration in EnsureFeed.
type FeedOption func(*jetstream.StreamConfig) error

// WithFeedMaxAge makes the feed keep each message for d (0: keep every
// message). Every replica that relays must be given the same value: the
// last EnsureFeed sets it.
func WithFeedMaxAge(d time.Duration) FeedOption {
	return func(c *jetstream.StreamConfig) error {
		if d < 0 {
			return fmt.Errorf("streams: feed max age must not be negative, got %s", d)
		}
		c.MaxAge = d
		if d > 0 && c.Duplicates > d {
			c.Duplicates = d // JetStream refuses a dedupe window longer than the max age
		}
		return nil
	}
}

// FeedStreamConfig is the feed stream's configuration. It keeps each
// message DefaultFeedMaxAge (WithFeedMaxAge changes it; the ledger it is
// derived from keeps every revision) and dedupes Nats-Msg-Id over
// DuplicateWindow.
func (l Layout) FeedStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		MaxAge:      DefaultFeedMaxAge,
		Name:        l.FeedStreamName(),
		Description: "spendgate live event feed (feed.v1): every ledger event, one message each, in commit order",
		Subjects:    []string{l.FeedFilter()},
		Retention:   jetstream.LimitsPolicy,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		MaxMsgSize:  FeedMaxMsgSize,
		Storage:     jetstream.FileStorage,
		Replicas:    l.c.Replicas,
		Discard:     jetstream.DiscardNew,
		Duplicates:  DuplicateWindow,
		DenyDelete:  true,
		DenyPurge:   true,
		AllowDirect: true,
	}
}

// EnsureFeed creates or updates the feed stream with opts applied. Like
// Ensure it is idempotent and safe to run from every replica at once: it
// creates first and retries what a cluster forming or another replica's
// create answers (ensureStream).
func EnsureFeed(ctx context.Context, js jetstream.JetStream, l Layout, opts ...FeedOption) (jetstream.Stream, error) {
	cfg := l.FeedStreamConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return ensureStream(ctx, js, cfg)
}

// BudgetKeysFilter matches every budget definition key
// ("$KV.<bucket>.budget.>").
func (l Layout) BudgetKeysFilter() string { return l.KeyPrefix() + budgetFamily + ".>" }

// Revision signature headers (package signing writes and checks them): the
// public nkey of the signer, and the base64url (no padding) Ed25519
// signature over signing.Input(key, payload).
const (
	HeaderSigKey = "Spendgate-Sig-Key"
	HeaderSig    = "Spendgate-Sig"
)

// Denial records (events.AdmitDenied): every replica publishes the admits
// it denies to a stream of their own, off the request path. They are
// operational data for spend reports, not the book of record.
const (
	// DenialVersion is the version token of denial subjects.
	DenialVersion = "v1"
	// DefaultDenialMaxAge is how long the denial stream keeps a record by
	// default: a report counts the denials of this long ago at most.
	DefaultDenialMaxAge = 31 * 24 * time.Hour
	// DenialMaxMsgSize caps one denial record (an admit request and its
	// denial).
	DenialMaxMsgSize = 64 << 10
	// DefaultDenialMaxBytes caps the denial stream by default: past it
	// the oldest records go first, whatever their age, so no tenant's
	// denials can fill the disk (each replica also bounds each tenant's
	// bytes per second).
	DefaultDenialMaxBytes = 1 << 30
	// DenialMaxDelay is the longest a denial or check record may be
	// stored after its own time ("at"): a replica drops a record it could
	// not publish sooner, and a reader skips one stored later as a replay
	// (DenialRecordDelay). Replica clocks must be within it of the NATS
	// servers'.
	DenialMaxDelay = 5 * time.Minute
)

// DenialRecordDelay is the longest a record of a denial stream whose
// Nats-Msg-Id dedupe window is dup may be stored after its own time and
// still count: DenialMaxDelay, or half of dup if that is shorter. A
// signed record published again under its own id within dup is dropped
// by the stream as a duplicate; after dup it is older than this.
func DenialRecordDelay(dup time.Duration) time.Duration {
	if dup > 0 && dup/2 < DenialMaxDelay {
		return dup / 2
	}
	return DenialMaxDelay
}

// DenialStreamName is the denial stream, "<bucket>_denials".
func (l Layout) DenialStreamName() string { return l.c.Bucket + "_denials" }

// DenialPrefix is "<prefix>denial.v1.", the start of every denial subject.
func (l Layout) DenialPrefix() string { return l.c.Prefix + "denial." + DenialVersion + "." }

// DenialFilter matches every denial subject ("spendgate.denial.v1.>").
func (l Layout) DenialFilter() string { return l.DenialPrefix() + ">" }

// DenialSubject is the subject of a denial record of tenant whose scope
// (the blocking budget's, or else the first the admit named, as the tenant
// names it) is scope: "<prefix>denial.v1.<scope kind>.<scope id>", or
// "<prefix>denial.v1.t.<tenant>.<scope kind>.<scope id>" for a tenant's
// (as FeedSubject does).
func (l Layout) DenialSubject(tenant string, scope events.Scope) string {
	if scope == "" {
		scope = "none:none"
	}
	if tenant != "" {
		return l.DenialPrefix() + TenantToken + "." + tenant + "." + scope.Kind() + "." + scope.ID()
	}
	return l.DenialPrefix() + scope.Kind() + "." + scope.ID()
}

// DenialMsgID is the Nats-Msg-Id of replica's record of a denial of
// tenant's requestID: a retry of the same denied request on one replica
// within DuplicateWindow is recorded once.
func DenialMsgID(replica, tenant, requestID string) string {
	return "denial/" + replica + "/" + tenant + "/" + requestID
}

// CheckMsgID is the Nats-Msg-Id of replica's record of a check or shadow
// answer (events.AdmitChecked) of tenant's requestID in mode, answered at
// at: a check is not remembered, so two checks of one request id are two
// records; the id only keeps a retried publish of one record from being
// stored twice.
func CheckMsgID(replica, tenant, mode, requestID string, at time.Time) string {
	return "check/" + replica + "/" + tenant + "/" + mode + "/" + requestID + "/" + strconv.FormatInt(at.UnixNano(), 10)
}

// DenialStreamConfig is the denial stream's configuration: each record
// kept maxAge (0: DefaultDenialMaxAge), at most maxBytes in all, the
// oldest discarded first (0: DefaultDenialMaxBytes; negative: no bound),
// Nats-Msg-Id deduped over DuplicateWindow (or maxAge if shorter).
func (l Layout) DenialStreamConfig(maxAge time.Duration, maxBytes int64) jetstream.StreamConfig {
	if maxAge <= 0 {
		maxAge = DefaultDenialMaxAge
	}
	switch {
	case maxBytes == 0:
		maxBytes = DefaultDenialMaxBytes
	case maxBytes < 0:
		maxBytes = -1
	}
	return jetstream.StreamConfig{
		Name:        l.DenialStreamName(),
		Description: "spendgate denial records (admit.denied.v1): the admits each replica denied, for spend reports; not the book of record",
		Subjects:    []string{l.DenialFilter()},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      maxAge,
		MaxMsgs:     -1,
		MaxBytes:    maxBytes,
		MaxMsgSize:  DenialMaxMsgSize,
		Storage:     jetstream.FileStorage,
		Replicas:    l.c.Replicas,
		Discard:     jetstream.DiscardOld,
		Duplicates:  min(DuplicateWindow, maxAge),
		DenyDelete:  true,
		DenyPurge:   true,
		AllowDirect: true,
	}
}

// EnsureDenials creates or updates the denial stream with records kept
// maxAge (0: DefaultDenialMaxAge) and at most maxBytes in all (0:
// DefaultDenialMaxBytes; negative: no bound). Like Ensure it is idempotent
// and safe to run from every replica at once; every replica should be
// given the same limits (the last to start sets them).
//
// The server reserves a byte cap whole from its JetStream storage when it
// creates the stream (or raises the cap), and a server without a storage
// limit of its own has 75% of the disk free when it started. With the
// default cap (maxBytes 0) that does not fit, the cap is halved until it
// does, down to MinDenialMaxBytes: denial records are for reports, and a
// nearly full disk must not keep the ledger from serving admits. The
// stream returned says the cap taken (CachedInfo().Config.MaxBytes). A cap
// given (maxBytes > 0, or none) that does not fit is an error
// (IsStorageExceeded).
func EnsureDenials(ctx context.Context, js jetstream.JetStream, l Layout, maxAge time.Duration, maxBytes int64) (jetstream.Stream, error) {
	if maxAge < 0 {
		return nil, fmt.Errorf("streams: denial max age must not be negative, got %s", maxAge)
	}
	cfg := l.DenialStreamConfig(maxAge, maxBytes)
	for {
		s, err := ensureStream(ctx, js, cfg)
		if !IsStorageExceeded(err) {
			return s, err
		}
		if maxBytes != 0 || cfg.MaxBytes/2 < MinDenialMaxBytes {
			what := "no cap"
			if cfg.MaxBytes > 0 {
				what = fmt.Sprintf("a cap of %d bytes", cfg.MaxBytes)
			}
			return nil, fmt.Errorf("streams: the denial stream %s with %s does not fit in the JetStream storage the server has left "+
				"(a server without a storage limit of its own has 75%% of the disk free when it started): "+
				"free disk space and restart the server, or give the denial stream a smaller cap: %w",
				cfg.Name, what, err)
		}
		cfg.MaxBytes /= 2
	}
}

// MinDenialMaxBytes is the least cap EnsureDenials lowers the default
// denial stream cap to when the server's storage has no room for it: about
// a thousand full denial records.
const MinDenialMaxBytes = 64 << 20

// jsErrCodeStorageExceeded is nats-server's JSStorageResourcesExceededErr
// ("insufficient storage resources available"): a stream's byte cap is
// more than the server's (or account's) JetStream storage has left to
// reserve.
const jsErrCodeStorageExceeded jetstream.ErrorCode = 10047

// IsStorageExceeded reports whether err is the server's refusal of a
// stream whose byte cap its JetStream storage cannot reserve: 10047 from
// a server on its own, and from a cluster's meta leader "no suitable
// peers for placement, insufficient storage" (10005) when storage is all
// it names. The meta leader says "insufficient storage" only of a peer
// that reported its storage (nats-server 2.15.2, selectPeerGroup: a peer
// it has not heard from yet is "peer offline", one it does not know yet
// "miscellaneous issue"); an answer that also names either may come from
// a cluster still forming, and is transient (IsTransient).
func IsStorageExceeded(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	if apiErr.ErrorCode == jsErrCodeStorageExceeded {
		return true
	}
	d := apiErr.Description
	return apiErr.ErrorCode == errNoSuitablePeers && strings.Contains(d, "insufficient storage") &&
		!strings.Contains(d, "peer offline") && !strings.Contains(d, "miscellaneous issue")
}

// ensureStream creates or updates the stream of cfg, retrying within
// StartRetryFor (and ctx) what a cluster forming or another replica's
// create at the same moment answers.
//
// It creates first, and updates only a stream that exists with another
// configuration ("name already in use"): a create of a stream that exists
// with cfg is answered with it, and so is a create that meets another
// replica's equal create in flight. Not CreateOrUpdateStream, whose update
// comes first: an update that met another replica's create still in
// flight on the meta leader left both requests unanswered (nats-server
// 2.15.2), so two replicas starting together each waited out a
// StartAttemptTimeout before the retry found the stream
// (TestEnsure_TwoNodesAtOnce).
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	var s jetstream.Stream
	err := RetryStart(ctx, StartRetryFor, func(err error) bool {
		if IsStorageExceeded(err) {
			return false // the caller's to decide (EnsureDenials lowers a default cap)
		}
		return errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) || isStoreFailed(err) || IsTransient(err)
	}, func(ctx context.Context) error {
		var err error
		s, err = js.CreateStream(ctx, cfg)
		if IsStorageExceeded(err) {
			// The server checks a create's byte cap against its storage
			// before it looks for the stream: a stream that exists with
			// that cap is counted twice, and a restart on a disk with
			// less than twice the cap free was refused. What exists is
			// judged as it is.
			if have, herr := js.Stream(ctx, cfg.Name); herr == nil {
				if configured(have.CachedInfo().Config, cfg) {
					s = have
					return nil
				}
				err = jetstream.ErrStreamNameAlreadyInUse
			}
		}
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			if s, err = js.UpdateStream(ctx, cfg); IsStorageExceeded(err) {
				return fmt.Errorf("streams: ensure %s: update: %w", cfg.Name, err)
			} else if err != nil {
				// Under spendgate roles a replica may not update these
				// streams (an update could drop what they hold), and an
				// identity that may not gets no answer at all.
				return fmt.Errorf("streams: ensure %s: it exists with another configuration, and updating it failed (under spendgate roles only the operator's identity may: start one replica once with it, or nats stream edit %s): %w", cfg.Name, cfg.Name, err)
			}
		}
		if err != nil {
			return fmt.Errorf("streams: ensure %s: %w", cfg.Name, err)
		}
		return nil
	})
	return s, err
}

// jsErrCodeStreamStoreFailed is nats-server's JSStreamStoreFailedF: a node
// could not create a stream's store.
const jsErrCodeStreamStoreFailed jetstream.ErrorCode = 10049

// isStoreFailed reports whether a stream create was answered "error
// creating store for stream" (10049). Two clients creating streams on two
// nodes of a cluster at once met it once in a soak (round 31 of 40 of
// TestEnsure_TwoNodesAtOnce), with the server's reason only in its log. The
// meta leader removes an assignment its member rejected within 5 s, so a
// create that follows can succeed; one that fails for a lasting cause
// fails again and is reported when StartRetryFor has passed.
func isStoreFailed(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeStreamStoreFailed
}

// ObjectIdle bounds how long ReadObjectLine waits for an object's first
// line, and with ObjectMinRate how long a whole object's read may take.
const ObjectIdle = 30 * time.Second

// ObjectMinRate is the slowest average rate, in bytes per second, at which
// an object is read whole: a read is bounded by ObjectIdle plus the
// object's size at this rate. The object store bounds a read as a whole,
// by its context's deadline (5 s without one: a snapshot that took longer
// to arrive was always cut short), never by its progress; honest reads go
// at hundreds of MB/s.
const ObjectMinRate = 4 << 20

// objectLimit bounds the read of an object of size bytes.
func objectLimit(size int) time.Duration {
	return ObjectIdle + time.Duration(size/ObjectMinRate)*time.Second
}

// openObject opens object name of store for reading, bounded by limit;
// done closes it. The read also ends on ctx's end (or when the caller
// stops reading), but takes its deadline from limit alone: the object
// store would bound a read without one by its default timeout, 5 s.
func openObject(ctx context.Context, store jetstream.ObjectStore, name string, limit time.Duration) (res jetstream.ObjectResult, done func(), err error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	stop := context.AfterFunc(ctx, cancel)
	res, err = store.Get(rctx, name)
	if err != nil {
		stop()
		cancel()
		return nil, nil, err
	}
	return res, func() { res.Close(); stop(); cancel() }, nil
}

// ErrNoLine: an object's first bytes hold no line (ReadObjectLine): it is
// not what the reader looks for, unlike a read that failed.
var ErrNoLine = errors.New("streams: no line")

// ReadObjectLine returns the first line of object name (without its
// newline), reading at most max bytes of it: a snapshot's header, without
// its body. An object whose first max bytes hold no newline, or that gives
// them not within ObjectIdle, is an error.
func ReadObjectLine(ctx context.Context, store jetstream.ObjectStore, name string, max int) ([]byte, error) {
	// A few KB: bounded as a whole, so that an object whose chunks never
	// come cannot hold its reader (pruning, the audit) for long.
	ctx, cancel := context.WithTimeout(ctx, ObjectIdle)
	defer cancel()
	res, done, err := openObject(ctx, store, name, ObjectIdle)
	if err != nil {
		return nil, err
	}
	defer done()
	line, err := bufio.NewReaderSize(io.LimitReader(res, int64(max)), max).ReadSlice('\n')
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: object %s: no line in its first %d bytes: %w", ErrNoLine, name, max, err)
	}
	return line[:len(line)-1], nil
}

// ReadObject reads the whole object name of store, bounded by its size
// (ObjectIdle plus its size at ObjectMinRate: a snapshot of hundreds of
// MB takes what it takes, well within); it fails past that, or when ctx
// ends.
func ReadObject(ctx context.Context, store jetstream.ObjectStore, name string) ([]byte, error) {
	o, err := ReadObjectAhead(ctx, store, name)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	return o.All()
}

// ObjectAhead is an object being read into memory by a goroutine of its
// own (ReadObjectAhead), so that its reader can decode its first bytes
// while the rest arrive: a replica's snapshot of 100 MB took 200-300 ms
// to read before its 0.7 s of decoding began.
type ObjectAhead struct {
	name string
	mu   sync.Mutex
	more *sync.Cond
	// buf holds the bytes read so far, in an array of the object's size
	// (the reading goroutine writes past len(buf), the reader reads
	// below it); err is set once reading ended, io.EOF when the whole
	// object arrived.
	buf    []byte
	err    error
	size   int
	done   func()
	exited chan struct{}
}

// ReadObjectAhead starts reading object name of store; Close stops it. As
// ReadObject, it fails past its size's bound, or when ctx ends. Its meta
// is read and checked first (its size against its bucket's, its chunks
// one object's, no link), so that a forged one costs no chunk read.
func ReadObjectAhead(ctx context.Context, store jetstream.ObjectStore, name string) (*ObjectAhead, error) {
	info, err := store.GetInfo(ctx, name)
	if err != nil {
		return nil, err
	}
	// The size comes from the object's meta, which anyone who may write
	// the bucket can write: it is checked before it sizes the buffer
	// (preallocated: honest objects arrive in one array, no copies) and
	// the read's bound, and before any chunk is asked for.
	size, err := objectSize(ctx, store, name, info.Size)
	if err == nil && info.Opts != nil && info.Opts.Link != nil {
		// The store would follow it, to the bucket's end or round a loop.
		err = fmt.Errorf("streams: object %s: its meta is a link, not an object", name)
	}
	if err == nil && size > 0 && !PlainNUID(info.NUID) {
		// Its reader would subscribe to $O.<bucket>.C.<nuid>: every
		// object's chunks, for "*" or ">".
		err = fmt.Errorf("streams: object %s: its meta names chunks %q, not one object's", name, info.NUID)
	}
	if err != nil {
		return nil, err
	}
	res, done, err := openObject(ctx, store, name, objectLimit(size))
	if err != nil {
		return nil, err
	}
	if got, err := res.Info(); err != nil || got.NUID != info.NUID || got.Size != info.Size {
		// The meta changed between the two reads: read it again later.
		done()
		return nil, fmt.Errorf("streams: object %s changed while it was opened", name)
	}
	o := &ObjectAhead{name: name, buf: make([]byte, 0, size), size: size, done: done, exited: make(chan struct{})}
	o.more = sync.NewCond(&o.mu)
	go o.read(ctx, res)
	return o, nil
}

// ErrObjectTooLarge: an object's meta claims more bytes than its bucket
// holds (ReadObjectAhead): its meta lies, and no chunk need be read.
var ErrObjectTooLarge = errors.New("streams: object larger than its bucket")

// objectSize returns size, an object's size as its meta says, once it is
// known to be no more than store's stream holds (one stream info request):
// a meta claiming 2^63 bytes or more would be a negative int (make panics),
// one claiming terabytes an allocation of terabytes, before any chunk is
// read or any digest checked.
func objectSize(ctx context.Context, store jetstream.ObjectStore, name string, size uint64) (int, error) {
	if size == 0 {
		return 0, nil
	}
	st, err := store.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("streams: object %s: the size of its bucket: %w", name, err)
	}
	if held := st.Size(); size > held || size > math.MaxInt {
		return 0, fmt.Errorf("%w: object %s: its meta says %d bytes, its bucket %s holds %d", ErrObjectTooLarge, name, size, st.Bucket(), held)
	}
	return int(size), nil
}

func (o *ObjectAhead) read(ctx context.Context, res jetstream.ObjectResult) {
	defer close(o.exited)
	size := o.size
	n, last := 0, time.Now()
	var over [1]byte
	for {
		dst := o.buf[n:size]
		if len(dst) == 0 {
			// All the bytes its info names: one more is an error.
			dst = over[:]
		}
		m, err := res.Read(dst)
		if m > 0 {
			last = time.Now()
		}
		switch {
		case m > 0 && n == size:
			err = fmt.Errorf("streams: object %s: more than the %d bytes its info says", o.name, size)
		case errors.Is(err, io.EOF) && n+m < size:
			err = fmt.Errorf("streams: object %s: %d bytes of the %d its info says: %w", o.name, n+m, size, io.ErrUnexpectedEOF)
		case errors.Is(err, io.EOF):
			err = io.EOF
		case err != nil && ctx.Err() != nil:
			err = ctx.Err()
		case err == nil && m == 0 && time.Since(last) > ObjectIdle:
			err = fmt.Errorf("streams: object %s: no byte for %s after %d of %d bytes", o.name, ObjectIdle, n, size)
		}
		if n < size {
			n += m
		}
		o.mu.Lock()
		o.buf = o.buf[:n]
		o.err = err
		o.mu.Unlock()
		o.more.Broadcast()
		if err != nil {
			return
		}
	}
}

// Wait returns the bytes read so far once there are at least n of them or
// reading ended, and what ended it: nil while reading, io.EOF once the
// whole object arrived, another error when reading failed or was stopped.
func (o *ObjectAhead) Wait(n int) ([]byte, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.buf) < n && o.err == nil {
		o.more.Wait()
	}
	return o.buf[:len(o.buf):len(o.buf)], o.err
}

// Size is the object's size, as its info says.
func (o *ObjectAhead) Size() int { return o.size }

// All waits for the whole object.
func (o *ObjectAhead) All() ([]byte, error) {
	buf, err := o.Wait(o.Size() + 1)
	if errors.Is(err, io.EOF) {
		return buf, nil
	}
	return nil, err
}

// Close stops reading (if it has not ended) and waits for the reading
// goroutine to return.
func (o *ObjectAhead) Close() {
	o.done()
	<-o.exited
}
