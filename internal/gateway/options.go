package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spendgate/spendgate/events"
)

// Provider kinds of an upstream.
const (
	// KindOpenAI is an OpenAI-compatible API: its base URL ends where the
	// SDKs' does ("https://api.openai.com/v1"), and the gateway forwards
	// /v1/chat/completions, /v1/completions, /v1/embeddings and
	// /v1/responses to <base>/chat/completions and so on.
	KindOpenAI = "openai"
	// KindAnthropic is the Anthropic Messages API: its base URL is the
	// host ("https://api.anthropic.com"), and /v1/messages goes to
	// <base>/v1/messages.
	KindAnthropic = "anthropic"
)

// Named bounds and defaults.
const (
	// DefaultMaxOutputTokens is what a call that names no maximum output
	// (max_tokens, max_completion_tokens, max_output_tokens) reserves for
	// its output when Config.MaxOutputTokens has no entry for its model.
	DefaultMaxOutputTokens = 16384
	// ImageTokens is what one image or file counts as input by default
	// (Config.ImageTokens): given inline (a data:image/ URL), instead of
	// its bytes; given by reference (an http(s) URL, a file_id), instead
	// of the reference's bytes, which say nothing of its size. Above what
	// a high-detail image costs on gpt-4o and Claude, below what
	// gpt-4o-mini bills one (up to 25,501).
	ImageTokens = 3000
	// DefaultKeyCache bounds how long a resolved key is trusted without
	// asking the ledger again: a disabled or rotated key is refused at
	// most this long (plus the replicas' fold lag, milliseconds) after the
	// change.
	DefaultKeyCache = 5 * time.Second
	// MaxKeyCache is the largest KeyCache accepted.
	MaxKeyCache = time.Minute
	// negativeKeyCache bounds how long an unknown or disabled key is
	// answered from the cache.
	negativeKeyCache = time.Second
	// MaxCachedKeys bounds the key cache's entries.
	MaxCachedKeys = 10000
	// DefaultMaxBody bounds a request body.
	DefaultMaxBody = 32 << 20
	// DefaultMaxBodiesInFlight bounds the bytes of the request bodies the
	// gateway holds at once (bodyBudget).
	DefaultMaxBodiesInFlight = 256 << 20
	// DefaultUpstreamTimeout is Config.UpstreamTimeout's default.
	DefaultUpstreamTimeout = 10 * time.Minute
	// DefaultMaxStream is Config.MaxStream's default: a 128k-token
	// answer at 50 tokens a second streams for 43 minutes.
	DefaultMaxStream = time.Hour
	// DefaultDrainAbandoned is Config.DrainAbandoned's default: the rest
	// of a chat answer (6,000 tokens at 50 a second) comes within it,
	// and a gateway holds a connection for a caller gone no longer.
	DefaultDrainAbandoned = 2 * time.Minute
	// ttlMargin is added to the upstream timeout for a reservation's TTL:
	// the sweeper never releases a call still running.
	ttlMargin = time.Minute
	// writeGrace is how long after the upstream timeout a call may still
	// write to its caller (forward): under ttlMargin, so a caller that
	// stops reading is settled before its reservation expires.
	writeGrace = 10 * time.Second
	// maxErrorBody bounds the upstream error body passed to the caller.
	maxErrorBody = 1 << 20
	// maxUsageScan bounds what of a plain answer is kept to read its
	// usage; past it only the tail is kept (usageTail).
	maxUsageScan = 8 << 20
	// usageTail is the tail kept of an answer larger than maxUsageScan.
	usageTail = 64 << 10
	// maxGenerations bounds the request ids derived from one
	// Idempotency-Key (see requestID).
	maxGenerations = 16
	// shutdownSettle bounds how long Wait lets settles in flight finish.
	shutdownSettle = 30 * time.Second
)

// Upstream is one provider the gateway forwards to.
type Upstream struct {
	// Kind is KindOpenAI or KindAnthropic.
	Kind string
	// BaseURL is the provider's base URL (see the kinds).
	BaseURL string
	// Key is the upstream's credential, sent as "Authorization: Bearer"
	// (OpenAI) or "x-api-key" (Anthropic). It never reaches a caller.
	Key string
	// Models, when set, are the model name prefixes this upstream serves
	// ("gpt-", "llama-"); an upstream without Models serves every model
	// of its kind that no upstream with Models claims.
	Models []string
}

// Config is what the gateway needs besides its ledger connection.
type Config struct {
	Upstreams []Upstream
	// MaxOutputTokens maps a model, or a prefix of models ending in '*'
	// ("claude-*"), to the output a call that names no maximum reserves;
	// DefaultMaxOutputTokens otherwise. The longest match wins.
	MaxOutputTokens map[string]int64
	// DefaultMaxOutput replaces DefaultMaxOutputTokens when positive.
	DefaultMaxOutput int64
	// ImageTokens replaces the default ImageTokens when positive.
	ImageTokens int64
	// KeyCache bounds how long a resolved key is trusted (DefaultKeyCache
	// when 0; at most MaxKeyCache).
	KeyCache time.Duration
	// AuthFailures is how many unknown keys a second one client address
	// may present, with a burst of twice that (DefaultAuthFailures when
	// 0; no limit when negative): past it, a key the cache does not know
	// as valid is refused 429 too_many_unknown_keys without asking the
	// ledger. A valid key never spends from it.
	AuthFailures int
	// MaxBody bounds a request body (DefaultMaxBody when 0).
	MaxBody int64
	// MaxBodiesInFlight bounds the bytes of the request bodies held at
	// once (DefaultMaxBodiesInFlight when 0; at least MaxBody): a call
	// whose body would pass it is refused 503 gateway_busy before its
	// body is read. Holding and parsing a body costs about three times
	// its size, so without it 20 bodies of 32 MiB at once took 2.1 GB.
	MaxBodiesInFlight int64
	// UpstreamTimeout bounds the wait for the upstream
	// (DefaultUpstreamTimeout when 0): for its response headers, then a
	// plain answer's whole call, or each wait for a stream's next bytes
	// (never a stream that keeps sending). A reservation's TTL is this
	// plus a minute.
	UpstreamTimeout time.Duration
	// MaxStream bounds a streamed call as a whole (DefaultMaxStream when
	// 0; at least UpstreamTimeout): a stream still running then is cut
	// as one silent for UpstreamTimeout is. A streamed call's reservation
	// has a TTL of this plus a minute, so that the sweeper never frees the
	// room of a stream still running.
	MaxStream time.Duration
	// DrainAbandoned bounds how long the gateway keeps reading the answer
	// of a call whose caller left before its end (a chat's "stop", a
	// client timeout), passing nothing on, for the usage the provider
	// reports at the end: a call whose answer ends within it is settled
	// from that usage (note NoteCallerGone), one that does not is cut
	// then and charged its reservation (note reservation_caller_gone),
	// as is every such call when DrainAbandoned is negative (cut at once).
	// DefaultDrainAbandoned when 0. The upstream timeout, MaxStream and
	// Drain bound the call all the same.
	DrainAbandoned time.Duration
	// SettleAfterReply settles a successful call after its answer has
	// gone to the caller, off the caller's path (one ledger round trip
	// less on every call), instead of before the answer's end. The
	// reservation then holds the call's maximum until the settle lands,
	// a few milliseconds later: a call right after it may be denied
	// against that maximum (never admitted past a limit). Off by default:
	// a caller that has its answer finds its spend in the ledger.
	SettleAfterReply bool
}

// Option configures New.
type Option func(*options) error

type options struct {
	log     *slog.Logger
	metrics *Metrics
	now     func() time.Time
	journal string
}

// WithJournal keeps the gateway's journal in the file at path (see
// journal.go): calls sent upstream whose close did not land yet, so that
// a gateway killed mid-call and started again on the same file closes
// them (RecoverJournal) instead of leaving their spend to the sweeper.
// New fails if the file cannot be opened, or another gateway uses it.
func WithJournal(path string) Option {
	return func(o *options) error {
		if path == "" {
			return errors.New("gateway: empty journal path")
		}
		o.journal = path
		return nil
	}
}

// WithLogger logs one line per call, and failures, to log (default: none).
func WithLogger(log *slog.Logger) Option {
	return func(o *options) error {
		if log == nil {
			return errors.New("gateway: nil logger")
		}
		o.log = log
		return nil
	}
}

// WithMetrics counts into m (default: a private set).
func WithMetrics(m *Metrics) Option {
	return func(o *options) error {
		if m == nil {
			return errors.New("gateway: nil metrics")
		}
		o.metrics = m
		return nil
	}
}

// WithClock sets the clock of Retry-After (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return errors.New("gateway: nil clock")
		}
		o.now = now
		return nil
	}
}

// upstream is a validated Upstream.
type upstream struct {
	Upstream
	base *url.URL
	// hinted is set once the gateway has logged that this upstream's 404
	// may come from a base URL without its API's path (see refused).
	hinted atomic.Bool
}

// validate checks c and fills its defaults.
func (c *Config) validate() ([]*upstream, error) {
	if len(c.Upstreams) == 0 {
		return nil, errors.New("gateway: no upstream")
	}
	var ups []*upstream
	for i, u := range c.Upstreams {
		if u.Kind != KindOpenAI && u.Kind != KindAnthropic {
			return nil, fmt.Errorf("gateway: upstream %d: kind %q, want %s or %s", i+1, u.Kind, KindOpenAI, KindAnthropic)
		}
		base, err := url.Parse(strings.TrimRight(u.BaseURL, "/"))
		if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
			return nil, fmt.Errorf("gateway: upstream %d: base URL %q is not an http(s) URL", i+1, u.BaseURL)
		}
		if u.Key == "" {
			return nil, fmt.Errorf("gateway: upstream %d (%s): no key", i+1, u.BaseURL)
		}
		ups = append(ups, &upstream{Upstream: u, base: base})
	}
	for m, n := range c.MaxOutputTokens {
		if n <= 0 || n > events.MaxTokens {
			return nil, fmt.Errorf("gateway: max output tokens of %s: %d out of range 1..%d", m, n, events.MaxTokens)
		}
	}
	if c.DefaultMaxOutput < 0 || c.DefaultMaxOutput > events.MaxTokens {
		return nil, fmt.Errorf("gateway: default max output tokens %d out of range", c.DefaultMaxOutput)
	}
	if c.DefaultMaxOutput == 0 {
		c.DefaultMaxOutput = DefaultMaxOutputTokens
	}
	if c.ImageTokens < 0 || c.ImageTokens > events.MaxTokens {
		return nil, fmt.Errorf("gateway: image tokens %d out of range", c.ImageTokens)
	}
	if c.ImageTokens == 0 {
		c.ImageTokens = ImageTokens
	}
	switch {
	case c.KeyCache == 0:
		c.KeyCache = DefaultKeyCache
	case c.KeyCache < 0 || c.KeyCache > MaxKeyCache:
		return nil, fmt.Errorf("gateway: key cache %s out of range (0, %s]", c.KeyCache, MaxKeyCache)
	}
	if c.AuthFailures == 0 {
		c.AuthFailures = DefaultAuthFailures
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.MaxBody < 1024 {
		return nil, fmt.Errorf("gateway: max body %d is too small", c.MaxBody)
	}
	if c.MaxBodiesInFlight == 0 {
		c.MaxBodiesInFlight = max(DefaultMaxBodiesInFlight, c.MaxBody)
	}
	if c.MaxBodiesInFlight < c.MaxBody {
		return nil, fmt.Errorf("gateway: bodies in flight %d must be at least the max body %d", c.MaxBodiesInFlight, c.MaxBody)
	}
	if c.UpstreamTimeout == 0 {
		c.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if c.UpstreamTimeout < time.Second || c.UpstreamTimeout+ttlMargin > events.MaxTTL {
		return nil, fmt.Errorf("gateway: upstream timeout %s out of range [1s, %s]", c.UpstreamTimeout, events.MaxTTL-ttlMargin)
	}
	if c.MaxStream == 0 {
		c.MaxStream = max(DefaultMaxStream, c.UpstreamTimeout)
	}
	if c.MaxStream < c.UpstreamTimeout || c.MaxStream+ttlMargin > events.MaxTTL {
		return nil, fmt.Errorf("gateway: max stream %s out of range [the upstream timeout %s, %s]", c.MaxStream, c.UpstreamTimeout, events.MaxTTL-ttlMargin)
	}
	if c.DrainAbandoned == 0 {
		c.DrainAbandoned = DefaultDrainAbandoned
	}
	return ups, nil
}

// maxOutput is what a call of model that names no maximum reserves.
func (c *Config) maxOutput(model string) int64 {
	if n, ok := c.MaxOutputTokens[model]; ok {
		return n
	}
	best, n := -1, c.DefaultMaxOutput
	for m, v := range c.MaxOutputTokens {
		if p, ok := strings.CutSuffix(m, "*"); ok && strings.HasPrefix(model, p) && len(p) > best {
			best, n = len(p), v
		}
	}
	return n
}

// route returns the upstream of kind that serves model, or nil: the one
// whose Models has the longest prefix of model, else the first of kind
// without Models.
func route(ups []*upstream, kind, model string) *upstream {
	var best *upstream
	bestLen := -1
	for _, u := range ups {
		if u.Kind != kind {
			continue
		}
		if len(u.Models) == 0 {
			if best == nil {
				best = u
			}
			continue
		}
		for _, p := range u.Models {
			if strings.HasPrefix(model, p) && len(p) > bestLen {
				best, bestLen = u, len(p)
			}
		}
	}
	return best
}

// ParseUpstream reads an upstream from its flag form,
// "KIND=URL[,key-env=VAR][,models=PREFIX|PREFIX...]": KIND is openai or
// anthropic, and its key is read with getenv from VAR, by default
// OPENAI_API_KEY or ANTHROPIC_API_KEY.
func ParseUpstream(spec string, getenv func(string) string) (Upstream, error) {
	kind, rest, ok := strings.Cut(spec, "=")
	if !ok || (kind != KindOpenAI && kind != KindAnthropic) {
		return Upstream{}, fmt.Errorf("upstream %q: want openai=URL or anthropic=URL", spec)
	}
	parts := strings.Split(rest, ",")
	u := Upstream{Kind: kind, BaseURL: parts[0]}
	env := map[string]string{KindOpenAI: "OPENAI_API_KEY", KindAnthropic: "ANTHROPIC_API_KEY"}[kind]
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "key-env":
			env = v
		case "models":
			for _, m := range strings.Split(v, "|") {
				if m != "" {
					u.Models = append(u.Models, m)
				}
			}
		default:
			return Upstream{}, fmt.Errorf("upstream %q: unknown option %q (key-env=VAR, models=PREFIX|...)", spec, k)
		}
	}
	if u.Key = getenv(env); u.Key == "" {
		return Upstream{}, fmt.Errorf("upstream %q: $%s, its key, is empty", spec, env)
	}
	return u, nil
}
