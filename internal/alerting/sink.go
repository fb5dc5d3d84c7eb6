package alerting

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/metrics"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// ErrConsumerFilter: the sink's durable consumer exists with another
// filter than the sink's (a sink of every alert, or of another tenant,
// made it).
var ErrConsumerFilter = errors.New("alerting: the durable consumer filters other alerts")

// Defaults of a Sink.
const (
	// DefaultDurable is the name of the webhook sink's durable consumer
	// on the alert stream.
	DefaultDurable = "spendgate-alerts-webhook"
	// DefaultMaxDeliver bounds the delivery attempts of one alert.
	DefaultMaxDeliver = 12
	// DefaultTimeout bounds one POST to the webhook.
	DefaultTimeout = 10 * time.Second
	// DefaultRetryBase and DefaultRetryMax shape the backoff between
	// attempts: base, 2 x base, 4 x base ..., at most max (with the
	// defaults 12 attempts span about 40 minutes of a webhook being down).
	DefaultRetryBase = time.Second
	DefaultRetryMax  = 10 * time.Minute
)

const (
	// keyWaitFirst and keyWaitMax space the attempts of an alert held for
	// a key reload (signed by a key the sink does not trust yet): 30 s,
	// doubling to 5 min, so that the default 12 attempts hold it about
	// 40 minutes before it is given up, and a reload delivers it within
	// 5 minutes.
	keyWaitFirst = 30 * time.Second
	keyWaitMax   = 5 * time.Minute
	// maxHeld bounds the alerts held for a key reload at once. A held
	// alert stays pending on the consumer (MaxAckPending 256): past this
	// many, one more is dropped as before holding existed, so that a login
	// that may publish alerts cannot stall the genuine ones by signing
	// junk with a key of its own.
	maxHeld = 64
	// heldLogEvery spaces the log lines of held alerts (one per alert
	// attempt would flood the log).
	heldLogEvery = time.Minute
)

// SinkConfig configures a Sink. URL is required; the rest have defaults.
type SinkConfig struct {
	// URL is the webhook (a Slack incoming webhook, or anything that takes
	// a JSON POST).
	URL string
	// Durable names the consumer (DefaultDurable, or DefaultDurable-TENANT
	// for a Tenant's sink). Sinks sharing it share the work: each alert
	// goes to one of them.
	Durable string
	// Tenant, when set, delivers that tenant's alerts only (its consumer
	// filters streams.Layout.TenantAlertFilter): a platform gives each
	// tenant a webhook of its own, which no other tenant's alert reaches.
	// "" delivers every alert.
	Tenant string
	// MaxDeliver bounds one alert's attempts (DefaultMaxDeliver); after
	// the last fails it is counted undelivered and left.
	MaxDeliver int
	// RetryBase and RetryMax shape the backoff between attempts.
	RetryBase, RetryMax time.Duration
	// Timeout bounds one POST (DefaultTimeout).
	Timeout time.Duration
	// FromStart makes a new consumer deliver every alert the stream
	// keeps; by default a new consumer starts with the alerts published
	// after it (an existing one resumes where it was, either way).
	FromStart bool
	// Client sends the POSTs (default: an http.Client of its own).
	Client *http.Client
	// Trust is the replicas' public keys: an alert is delivered only if
	// one of them that is not distrusted signed it (Verify). An alert
	// validly signed by a key not among them (a replica with a new key,
	// whose key the sink has not been given yet) is held for a key reload
	// (SetTrust): tried again with a growing delay, counted
	// (metrics.SinkFailUntrustedKey) at each attempt, and given up as
	// undelivered after the last. Any other message on the alert stream,
	// which the replica login may write, is counted
	// (metrics.SinkFailForged) and dropped. Nil delivers every alert
	// unverified.
	Trust *signing.KeySet
	// Metrics counts deliveries and failures (nil: not counted).
	Metrics *metrics.AlertSink
	Log     *slog.Logger
}

// Sink delivers the alert stream to a webhook: a durable consumer with
// explicit acks, each alert POSTed as Slack-compatible JSON (WebhookBody)
// and acknowledged only after a 2xx answer; any other outcome is a nak
// with the next backoff delay, until MaxDeliver attempts, after which the
// alert is terminated and counted undelivered. An alert signed by a key it
// does not trust yet is held for a key reload (SetTrust) the same way.
// Delivery is at least once:
// a POST whose ack is lost is sent again, with the same Idempotency-Key
// header (the alert's id) for a receiver that dedupes.
type Sink struct {
	js     jetstream.JetStream
	layout streams.Layout
	cfg    SinkConfig
	m      *metrics.AlertSink
	// trust is the keys alerts are verified against (cfg.Trust, then
	// SetTrust's).
	trust atomic.Pointer[signing.KeySet]
	// keyWaitFirst and keyWaitMax space a held alert's attempts (the
	// package's constants; tests shorten them).
	keyWaitFirst, keyWaitMax time.Duration

	mu sync.Mutex
	// held is the stream sequences of the alerts held for a key reload.
	held map[uint64]struct{}
	// heldLogged is when a held alert was last logged; heldQuiet counts
	// the attempts held since without a log line.
	heldLogged time.Time
	heldQuiet  int
}

// CheckURL checks that raw is an http(s) URL with a host. Its error does
// not quote raw (a webhook URL's path often holds its secret).
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("alerting: the webhook URL is not an http(s) URL with a host")
	}
	return nil
}

// NewSink checks cfg (CheckURL) and returns a Sink. It does no I/O until
// Run.
func NewSink(js jetstream.JetStream, layout streams.Layout, cfg SinkConfig) (*Sink, error) {
	if err := CheckURL(cfg.URL); err != nil {
		return nil, err
	}
	if cfg.Tenant != "" {
		if err := events.ValidateTenant(cfg.Tenant); err != nil {
			return nil, err
		}
	}
	if cfg.Durable == "" {
		cfg.Durable = DefaultDurable
		if cfg.Tenant != "" {
			cfg.Durable += "-" + cfg.Tenant
		}
	}
	if cfg.MaxDeliver <= 0 {
		cfg.MaxDeliver = DefaultMaxDeliver
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = DefaultRetryBase
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = DefaultRetryMax
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	m := cfg.Metrics
	if m == nil {
		m = metrics.NewAlertSink(nil)
	}
	s := &Sink{js: js, layout: layout, cfg: cfg, m: m, keyWaitFirst: keyWaitFirst, keyWaitMax: keyWaitMax,
		held: map[uint64]struct{}{}}
	s.trust.Store(cfg.Trust)
	return s, nil
}

// SetTrust replaces the keys alerts are verified against (a SIGHUP that
// read --trusted-keys again), for the alerts handled from now on: an alert
// held because its key was unknown is delivered at its next attempt if ks
// trusts its key. Nil is ignored: a sink that verifies never stops.
func (s *Sink) SetTrust(ks *signing.KeySet) {
	if ks != nil {
		s.trust.Store(ks)
	}
}

// Trust returns the keys alerts are verified against now (nil: none are
// verified).
func (s *Sink) Trust() *signing.KeySet { return s.trust.Load() }

// Held returns how many alerts are held for a key reload now.
func (s *Sink) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// ConsumerConfig is the sink's durable consumer on the alert stream.
func (s *Sink) ConsumerConfig() jetstream.ConsumerConfig {
	policy := jetstream.DeliverNewPolicy
	if s.cfg.FromStart {
		policy = jetstream.DeliverAllPolicy
	}
	filter, desc := s.layout.AlertFilter(), "spendgate alerts webhook sink"
	if s.cfg.Tenant != "" {
		filter, desc = s.layout.TenantAlertFilter(s.cfg.Tenant), desc+" of tenant "+s.cfg.Tenant
	}
	return jetstream.ConsumerConfig{
		Durable:       s.cfg.Durable,
		Description:   desc,
		FilterSubject: filter,
		DeliverPolicy: policy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		// An attempt takes at most Timeout; the ack wait leaves room so a
		// slow webhook is not redelivered while its POST runs.
		AckWait:       s.cfg.Timeout + 30*time.Second,
		MaxDeliver:    s.cfg.MaxDeliver,
		MaxAckPending: 256,
	}
}

// Run delivers alerts until ctx ends. It waits for the alert stream (the
// replicas create it) and creates the consumer if it does not exist (an
// existing one keeps its position; its deliver policy is not changed).
func (s *Sink) Run(ctx context.Context) error {
	stream, err := s.js.Stream(ctx, s.layout.AlertStreamName())
	for logged := false; errors.Is(err, jetstream.ErrStreamNotFound); logged = true {
		if !logged {
			s.cfg.Log.Warn("alert webhook: waiting for the alert stream (spendgate serve creates it)", "stream", s.layout.AlertStreamName())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		stream, err = s.js.Stream(ctx, s.layout.AlertStreamName())
	}
	if err != nil {
		return fmt.Errorf("alerting: the alert stream %s: %w", s.layout.AlertStreamName(), err)
	}
	cfg := s.ConsumerConfig()
	cons, err := stream.Consumer(ctx, cfg.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cons, err = stream.CreateConsumer(ctx, cfg)
	}
	if err != nil {
		return fmt.Errorf("alerting: consumer %s: %w", cfg.Durable, err)
	}
	if got := cons.CachedInfo().Config.FilterSubject; got != cfg.FilterSubject {
		// Another sink's consumer (every alert, or another tenant's):
		// resuming it would deliver alerts this webhook must not get.
		return fmt.Errorf("%w: consumer %s delivers %q, this sink %q: give it a --durable of its own", ErrConsumerFilter, cfg.Durable, got, cfg.FilterSubject)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) { s.handle(ctx, msg) })
	if err != nil {
		return fmt.Errorf("alerting: consume %s: %w", cfg.Durable, err)
	}
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return ctx.Err()
}

// WebhookBody is what the sink POSTs: Slack's {"text": ...} (Slack shows
// the text and ignores the rest) and the alert itself, for a receiver
// that reads fields.
type WebhookBody struct {
	Text  string       `json:"text"`
	Alert events.Alert `json:"alert"`
}

// handle makes one delivery attempt of msg.
func (s *Sink) handle(ctx context.Context, msg jetstream.Msg) {
	sig := Verify(s.trust.Load(), msg.Subject(), msg.Headers(), msg.Data())
	if sig == signing.ReasonUntrustedKey {
		s.untrusted(msg)
		return
	}
	// Held no longer, if it was: it verifies now, or fails for good.
	s.release(msg)
	if sig != "" {
		// Never delivered: no replica's key signed it.
		s.m.Failures.WithLabelValues(metrics.SinkFailForged).Inc()
		s.cfg.Log.Error("alert webhook: an alert no trusted key signed, dropped (a login that may publish alerts wrote it)",
			"subject", msg.Subject(), "reason", string(sig))
		_ = msg.Term()
		return
	}
	a, err := events.DecodeAlert(msg.Data())
	if err != nil {
		// Never deliverable: counted and dropped.
		s.m.Failures.WithLabelValues(metrics.SinkFailMalformed).Inc()
		s.cfg.Log.Error("alert webhook: unreadable alert, dropped", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	if s.cfg.Tenant != "" && a.Balance.Scope.Tenant() != s.cfg.Tenant {
		// The tenant's filter also matches the alerts of an untenanted
		// budget whose scope is t:<tenant> ("spendgate.alert.v1.t.acme.month..."):
		// the deployment's alert, never the tenant's, so its webhook must
		// not get it.
		_ = msg.Ack()
		return
	}
	reason, err := s.post(ctx, a)
	if err == nil {
		s.m.Deliveries.Inc()
		// Acked only now; a lost ack redelivers (at least once).
		if err := msg.DoubleAck(ctx); err != nil {
			s.cfg.Log.Warn("alert webhook: ack", "id", a.ID, "err", err)
		}
		return
	}
	s.m.Failures.WithLabelValues(reason).Inc()
	n := uint64(1)
	if md, mdErr := msg.Metadata(); mdErr == nil {
		n = md.NumDelivered
	}
	if n >= uint64(s.cfg.MaxDeliver) {
		s.m.Undelivered.Inc()
		s.cfg.Log.Error("alert webhook: giving up", "id", a.ID, "attempts", n, "err", err)
		_ = msg.Term()
		return
	}
	delay := s.backoff(n)
	s.cfg.Log.Warn("alert webhook: delivery failed, retrying", "id", a.ID, "attempt", n, "retry_in", delay, "err", err)
	_ = msg.NakWithDelay(delay)
}

// untrusted handles an alert validly signed by a key the sink does not
// trust: the key of a replica that joined, or rotated its key, before the
// sink was given it (--trusted-keys and SIGHUP). It is held: a nak with a
// delay (keyWaitFirst doubling to keyWaitMax), so that once the keys are
// reloaded it verifies and is delivered, where a term would lose it for
// good. An alert on its last attempt, or one more while maxHeld others are
// held, is given up: terminated and counted undelivered.
func (s *Sink) untrusted(msg jetstream.Msg) {
	s.m.Failures.WithLabelValues(metrics.SinkFailUntrustedKey).Inc()
	key := msg.Headers().Get(streams.HeaderSigKey)
	md, err := msg.Metadata()
	if err != nil {
		// Not from a consumer: nothing to hold it with.
		s.cfg.Log.Error("alert webhook: an alert signed by a key the sink does not trust, dropped", "subject", msg.Subject(), "key", key, "err", err)
		_ = msg.Term()
		return
	}
	n, seq := md.NumDelivered, md.Sequence.Stream
	s.mu.Lock()
	_, already := s.held[seq]
	giveUp := n >= uint64(s.cfg.MaxDeliver) || (!already && len(s.held) >= maxHeld)
	if giveUp {
		delete(s.held, seq)
	} else {
		s.held[seq] = struct{}{}
	}
	held := len(s.held)
	logIt := giveUp || time.Since(s.heldLogged) >= heldLogEvery
	quiet := s.heldQuiet
	if logIt && !giveUp {
		s.heldLogged, s.heldQuiet = time.Now(), 0
	} else if !logIt {
		s.heldQuiet++
	}
	s.mu.Unlock()
	if giveUp {
		s.m.Undelivered.Inc()
		s.cfg.Log.Error("alert webhook: giving up on an alert signed by a key the sink does not trust (add the key to --trusted-keys and send the sink SIGHUP)",
			"subject", msg.Subject(), "key", key, "attempts", n, "held", held)
		_ = msg.Term()
		return
	}
	delay := s.keyWait(n)
	if logIt {
		s.cfg.Log.Warn("alert webhook: an alert signed by a key the sink does not trust (yet), held for a key reload: add the key to --trusted-keys and send the sink SIGHUP",
			"subject", msg.Subject(), "key", key, "attempt", n, "retry_in", delay, "held", held, "held_attempts_not_logged", quiet)
	}
	_ = msg.NakWithDelay(delay)
}

// release forgets msg as held.
func (s *Sink) release(msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		return
	}
	s.mu.Lock()
	delete(s.held, md.Sequence.Stream)
	s.mu.Unlock()
}

// keyWait is the delay after the n-th attempt of a held alert.
func (s *Sink) keyWait(n uint64) time.Duration {
	d := s.keyWaitFirst
	for i := uint64(1); i < n && d < s.keyWaitMax; i++ {
		d *= 2
	}
	return min(d, s.keyWaitMax)
}

// backoff is the delay after the n-th failed attempt.
func (s *Sink) backoff(n uint64) time.Duration {
	d := s.cfg.RetryBase
	for i := uint64(1); i < n && d < s.cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, s.cfg.RetryMax)
}

// post sends a to the webhook; on failure it returns the failure's reason
// (metrics.SinkFail*).
func (s *Sink) post(ctx context.Context, a events.Alert) (string, error) {
	a.Type = events.TypeAlert
	body, err := json.Marshal(WebhookBody{Text: a.Summary(), Alert: a})
	if err != nil {
		return metrics.SinkFailMalformed, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return metrics.SinkFailTransport, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", a.ID)
	req.Header.Set(streams.HeaderAlertID, a.ID)
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		// Not the *url.Error: it quotes the URL, whose path often holds
		// the webhook's secret.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return metrics.SinkFailTransport, fmt.Errorf("POST to the webhook: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return metrics.SinkFailStatus, fmt.Errorf("webhook answered %s", resp.Status)
	}
	return "", nil
}
