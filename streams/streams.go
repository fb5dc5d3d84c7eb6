package streams

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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
	// allows 1000. Multi-budget Txs are grouped into batches up to this.
	MaxBatch = 256
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
}

// DefaultConfig is the embedded single-server configuration.
func DefaultConfig() Config {
	return Config{Bucket: DefaultBucket, Replicas: 1, Prefix: DefaultPrefix}
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
		Description:        "spendgate ledger: budget definitions and balances; every revision is kept as the book of record",
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
		DenyPurge:          true,
		AllowDirect:        true,
		AllowAtomicPublish: true,
	}
}

// Ensure creates or updates the ledger stream. It is idempotent and safe to
// run from every replica at start. It never calls UpdateKeyValue, which
// would rebuild the stream without atomic publish.
func Ensure(ctx context.Context, js jetstream.JetStream, l Layout) (jetstream.Stream, error) {
	cfg := l.StreamConfig()
	var s jetstream.Stream
	var err error
	// Right after a cluster forms, stream creation may fail with "no
	// suitable peers" for a moment: retry within ctx.
	for attempt := 0; ; attempt++ {
		s, err = js.CreateOrUpdateStream(ctx, cfg)
		if err == nil {
			return s, nil
		}
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != errNoSuitablePeers || attempt >= 50 {
			return nil, fmt.Errorf("streams: ensure %s: %w", cfg.Name, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("streams: ensure %s: %w", cfg.Name, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
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
)

// BudgetKey is "budget.<kind>.<id>.<period>".
func BudgetKey(b events.BudgetRef) string {
	return budgetFamily + "." + b.Scope.Kind() + "." + b.Scope.ID() + "." + string(b.Period)
}

// BalanceKey is "balance.<kind>.<id>.<period>.<instance>".
func BalanceKey(b events.BalanceRef) string {
	return balanceFamily + "." + b.Scope.Kind() + "." + b.Scope.ID() + "." + string(b.Period) + "." + b.Instance
}

// BalanceKeysFilter matches every balance key ("balance.>").
func (l Layout) BalanceKeysFilter() string { return l.KeyPrefix() + balanceFamily + ".>" }

// IsBudgetKey reports whether key is a budget definition key.
func IsBudgetKey(key string) bool { return strings.HasPrefix(key, budgetFamily+".") }

// IsBalanceKey reports whether key is a balance key.
func IsBalanceKey(key string) bool { return strings.HasPrefix(key, balanceFamily+".") }

// Service subjects, under the prefix.
const (
	EndpointAdmit      = "admit"
	EndpointSettle     = "settle"
	EndpointRelease    = "release"
	EndpointBudgetPut  = "budget.put"
	EndpointBudgetGet  = "budget.get"
	EndpointBudgetList = "budget.list"
)

// Endpoint returns the subject of an endpoint ("spendgate.admit").
func (l Layout) Endpoint(name string) string { return l.c.Prefix + name }

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

// IsConflictCode reports whether a JetStream error code is a CAS conflict.
func IsConflictCode(code int) bool {
	return code == int(jetstream.JSErrCodeStreamWrongLastSequence) ||
		code == int(jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
