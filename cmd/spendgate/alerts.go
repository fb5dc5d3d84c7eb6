package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/alerting"
	"github.com/spendgate/spendgate/internal/config"
	"github.com/spendgate/spendgate/internal/metrics"
	"github.com/spendgate/spendgate/internal/ops"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// envAlertWebhookURL holds the webhook URL when --url is not given (a
// Slack webhook URL is a secret: better not on a command line).
const envAlertWebhookURL = "SPENDGATE_ALERT_WEBHOOK_URL"

var (
	alertsCommand = command{
		name:     "spendgate alerts",
		synopsis: "webhook --url URL [flags]",
		about: `Budget alerts (docs/alerts.md). One command so far:

  webhook   deliver the alert stream to a webhook (Slack-compatible JSON)`,
	}
	alertsWebhookCommand = command{
		name:     "spendgate alerts webhook",
		synopsis: "--url URL (--trusted-keys KEYS | --unverified) [--tenant NAME] [--durable NAME] [--max-deliver N] [--from-start] [--listen 127.0.0.1:9190] [--nats-url URL] ...",
		about: `Delivers the alert stream (<bucket>_alerts, which the replicas fill) to a
webhook: each alert is POSTed as {"text": "...", "alert": {...}} (a Slack
incoming webhook shows the text), with an Idempotency-Key header holding the
alert's id, and acknowledged only after a 2xx answer. Any other answer, or no
answer within --webhook-timeout, is retried with backoff (--retry-base
doubling up to --retry-max) until --max-deliver attempts; then the alert is
counted undelivered and left. Progress is a durable consumer (--durable):
a restarted sink resumes where it was, and sinks sharing it share the work.
A new consumer starts with the alerts published after it (--from-start: with
every alert the stream keeps). --tenant NAME delivers that tenant's alerts
only, on a consumer of its own (default durable spendgate-alerts-webhook-NAME):
one sink per tenant gives each its own webhook, which no other tenant's alert
reaches. A durable that exists with another filter is refused.
The URL may come from $` + envAlertWebhookURL + `.
Only alerts signed by one of --trusted-keys (the replicas' public keys) are
delivered: the replica login may publish to the alert stream, and anything
else there is dropped and counted (reason forged); --unverified delivers
every alert unchecked. An alert signed by a key not in the list (a replica
with a new key) is held for a key reload, tried again every 30 s doubling
to 5 min (reason untrusted-key) until --max-deliver attempts: SIGHUP reads
--trusted-keys again, as it does for serve.
--listen serves /metrics (spendgate_alert_webhook_deliveries_total,
spendgate_alert_webhook_failures_total{reason},
spendgate_alert_webhook_undelivered_total), /healthz and /readyz; "" serves
nothing. Runs until interrupted.`,
	}
)

// alertsCmd is spendgate alerts: a subcommand, then the webhook sink.
func alertsCmd(args []string) int {
	if len(args) == 0 || args[0] != "webhook" {
		return alertsCommand.noSubcommand(args, "which alerts command? (webhook)")
	}
	fs := newFlagSet("alerts webhook")
	var c clientFlags
	c.register(fs)
	bucket := fs.String("bucket", streams.DefaultBucket, "ledger bucket name")
	hook := fs.String("url", os.Getenv(envAlertWebhookURL), "the webhook's http(s) URL (default $"+envAlertWebhookURL+"; required)")
	durable := fs.String("durable", "", "the sink's durable consumer on the alert stream (default "+alerting.DefaultDurable+"[-TENANT])")
	tenant := fs.String("tenant", "", "deliver this tenant's alerts only (a webhook of the tenant's own); default every alert")
	maxDeliver := fs.Int("max-deliver", alerting.DefaultMaxDeliver, "delivery attempts of one alert before it is counted undelivered")
	retryBase := fs.Duration("retry-base", alerting.DefaultRetryBase, "delay before the second attempt; it doubles with each attempt")
	retryMax := fs.Duration("retry-max", alerting.DefaultRetryMax, "longest delay between attempts")
	hookTimeout := fs.Duration("webhook-timeout", alerting.DefaultTimeout, "bound of one POST")
	fromStart := fs.Bool("from-start", false, "a new consumer delivers every alert the stream keeps, not only those published after it")
	listen := fs.String("listen", "127.0.0.1:9190", `address of /metrics, /healthz and /readyz ("" serves none)`)
	httpHosts := fs.String("http-hosts", "", "host names, comma-separated, that /metrics answers to besides IP addresses, localhost and the name in --listen (a request naming any other is refused 403)")
	var vf verifyFlags
	fs.StringVar(&vf.trusted, "trusted-keys", os.Getenv("SPENDGATE_TRUSTED_KEYS"), "the replicas' public keys, or files of them, comma-separated ($SPENDGATE_TRUSTED_KEYS; with the embedded server ./spendgate-data/trusted-keys): only alerts one of them signed are delivered; re-read on SIGHUP")
	fs.BoolVar(&vf.unverified, "unverified", false, "deliver every alert without checking its signature (replicas of a version that did not sign alerts)")
	var logging config.Logging
	logging.AddFlags(fs)
	if code, ok := alertsWebhookCommand.parse(fs, args[1:]); !ok {
		return code
	}
	if *hook == "" {
		return alertsWebhookCommand.usageError(fs, "--url is required (or $"+envAlertWebhookURL+")")
	}
	trust, err := vf.keys()
	if errors.Is(err, errNeedKeys) {
		return alertsWebhookCommand.usageError(fs, "needs --trusted-keys KEYS (the replicas' public keys; with the embedded server ./spendgate-data/trusted-keys) to deliver only the alerts they signed, or --unverified to deliver every alert unchecked")
	}
	if err != nil {
		return alertsWebhookCommand.usageError(fs, err.Error())
	}
	if *maxDeliver < 1 || *retryBase <= 0 || *retryMax < *retryBase || *hookTimeout <= 0 {
		return alertsWebhookCommand.usageError(fs, "--max-deliver must be at least 1, --retry-base and --webhook-timeout positive, --retry-max at least --retry-base")
	}
	layout, err := streams.New(streams.Config{Bucket: *bucket, Prefix: c.prefix})
	if err != nil {
		return alertsWebhookCommand.usageError(fs, err.Error())
	}
	if err := alerting.CheckURL(*hook); err != nil {
		return alertsWebhookCommand.usageError(fs, "--url: "+err.Error())
	}
	if *tenant != "" {
		if err := events.ValidateTenant(*tenant); err != nil {
			return alertsWebhookCommand.usageError(fs, "--tenant: "+err.Error())
		}
	}
	log := logging.New(os.Stderr)
	// SIGHUP reads --trusted-keys again, as serve does (key rotation, a
	// replica with a key of its own joining; see docs/security.md, Keys):
	// alerts held because their key was unknown are delivered at their
	// next attempt. Taken from here on, so that one sent while the sink
	// connects does not kill it; it is acted on once the sink runs.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reg := metrics.NewRegistry()
	var srv *ops.Server
	if *listen != "" {
		if srv, err = ops.New(*listen, metrics.Handler(reg), ops.WithLogger(log), ops.WithHosts(strings.Split(*httpHosts, ",")...)); err == nil {
			err = srv.Listen()
		}
		if err != nil {
			log.Error("cannot serve --listen", "err", err)
			return exitError
		}
	}
	nc, err := c.conn.Connect("spendgate-alerts-webhook", nats.MaxReconnects(-1))
	if err != nil {
		log.Error("cannot connect to NATS", "err", err)
		return exitError
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Error("jetstream", "err", err)
		return exitError
	}
	sink, err := alerting.NewSink(js, layout, alerting.SinkConfig{URL: *hook, Durable: *durable, Tenant: *tenant, MaxDeliver: *maxDeliver,
		RetryBase: *retryBase, RetryMax: *retryMax, Timeout: *hookTimeout, FromStart: *fromStart, Trust: trust,
		Metrics: metrics.NewAlertSink(reg), Log: log})
	if err != nil {
		log.Error("alerts webhook", "err", err)
		return exitError
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		for {
			select {
			case <-hup:
				reloadAlertTrust(log, vf, sink)
			case <-ctx.Done():
				return
			}
		}
	}()
	done := make(chan error, 1)
	if srv != nil {
		srv.AddCheck("nats", func() error {
			if !nc.IsConnected() {
				return errors.New("not connected to NATS")
			}
			return nil
		})
		go func() { done <- srv.Run(ctx) }()
	}
	// The URL's path and query often hold the webhook's secret: only its
	// host is logged.
	host := ""
	if u, err := url.Parse(*hook); err == nil {
		host = u.Host
	}
	log.Info("alerts webhook sink running", "stream", layout.AlertStreamName(), "consumer", *durable, "webhook_host", host,
		"nats", nc.ConnectedUrlRedacted(), "unverified", vf.unverified, "trusted_keys", trustedKeyNames(trust))
	err = sink.Run(ctx)
	if srv != nil {
		if serr := <-done; serr != nil && err == nil {
			err = serr
		}
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "spendgate alerts webhook:", err)
		return exitError
	}
	return exitOK
}

// reloadAlertTrust reads --trusted-keys again (SIGHUP) with the loader
// that read it at start, and gives the sink what it read; on error the
// sink keeps the keys it has.
func reloadAlertTrust(log *slog.Logger, vf verifyFlags, sink *alerting.Sink) {
	if vf.unverified {
		log.Warn("SIGHUP: --unverified: no trusted keys to reload, alerts are delivered unchecked")
		return
	}
	ks, err := vf.keys()
	if err != nil {
		log.Error("SIGHUP: trusted keys not reloaded; the old ones stay in use", "err", err)
		return
	}
	changed := ks.String() != sink.Trust().String()
	sink.SetTrust(ks)
	log.Info("SIGHUP: trusted keys reloaded", "changed", changed, "trusted_keys", trustedKeyNames(ks), "distrusted", len(ks.Distrusted()), "held", sink.Held())
}

// trustedKeyNames lists the public keys ks trusts, for a log line.
func trustedKeyNames(ks *signing.KeySet) []string {
	var pubs []string
	for _, k := range ks.Keys() {
		pubs = append(pubs, k.Public)
	}
	return pubs
}
