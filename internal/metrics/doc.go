// Package metrics is spendgate's metric set over the Prometheus Go client
// (github.com/prometheus/client_golang): New returns a Set whose fields are
// the client's counters, gauges and histograms, registered in a registry
// of the Set's own (never the client's global one) together with the Go
// runtime's go_* and the process' process_* metrics; Handler serves it.
//
// Amounts stay exact decimals up to the exposition: the per-budget gauges
// receive the ledger's decimal strings and turn each into the float64 a
// Prometheus server would parse its exact text to (strconv.ParseFloat
// rounds correctly, as the server does), so nothing is lost that the server
// would keep; utilization is computed and ranked exactly (apd), then
// rounded once. Nothing on the money path reads these floats.
//
// # Spendgate's metrics
//
// New returns the Set whose families the table below lists, with those its
// Register methods add for parts that compute them (RegisterBudgets,
// RegisterFollowerLag, RegisterSnapshotAge, RegisterTenants). The families
// of the ledger's health and exposure, the feed relay, the tenant consumer
// check, the denial recorder, the report and the alerts
// (RegisterLedgerHealth, RegisterFeedRelay, RegisterTenantConsumerCheck,
// RegisterDenials, RegisterReport, RegisterAlerts), and the gateway's own,
// are listed with these in docs/operator.md ("Metrics, health and the
// dashboard") and the pages it links.
//
//	name                                  type       labels                 meaning
//	spendgate_admits_total                counter    result, reason         admit decisions; result admitted|denied, reason the denial code ("" when admitted)
//	spendgate_admit_checks_total          counter    mode, result, reason   admits with mode check or shadow, which reserve nothing; counted apart from spendgate_admits_total
//	spendgate_requests_total              counter    endpoint, code         requests answered; code "ok" or the reply's error code
//	spendgate_request_duration_seconds    histogram  endpoint               take-to-reply time, buckets 100µs..10s (LatencyBuckets)
//	spendgate_inflight_requests           gauge                             requests being handled now
//	spendgate_ledger_busy_total           counter    cause                  ledger_busy answers; cause inflight_limit|cas_exhausted
//	spendgate_commits_total               counter                           successful ledger writes
//	spendgate_commit_txs                  histogram                         transactions per successful write, buckets 1..4096 (TxBuckets)
//	spendgate_cas_conflicts_total         counter                           writes lost to compare-and-set
//	spendgate_sweeper_released_total      counter                           reservations expired by the sweeper
//	spendgate_revisions_rejected_total    counter    reason                 ledger revisions skipped instead of folded
//	spendgate_follower_lag_revisions      gauge                             stream messages not folded yet (RegisterFollowerLag)
//	spendgate_open_reservations           gauge      scope, period, unit    open reservations per budget (RegisterBudgets)
//	spendgate_reserved_amount             gauge      scope, period, unit    amount held per budget (RegisterBudgets)
//	spendgate_spent_amount                gauge      scope, period, unit    amount settled per budget (RegisterBudgets)
//	spendgate_limit_amount                gauge      scope, period, unit    limit per budget (RegisterBudgets)
//	spendgate_budget_utilization_ratio    gauge      scope, period, unit    (spent + reserved) / limit (RegisterBudgets)
//	spendgate_budgets_not_exposed         gauge                             budgets left out of the five above by the series limit
//	spendgate_snapshot_age_seconds        gauge                             age of the newest snapshot (RegisterSnapshotAge)
//	spendgate_tenant_limited_total        counter    tenant, limit          tenant_limit refusals (limit open_reservations|request_rate|default_budgets) and denial records not stored (denial_bytes)
//	spendgate_tenant_unknown_scope_denials_total  counter  tenant           a tenant's denials for scopes it has no budget for: counted, never recorded
//	spendgate_tenant_open_reservations    gauge      tenant                 open reservations per tenant, from the book (RegisterTenants)
//	spendgate_tenant_default_budgets      gauge      tenant                 budgets created per tenant from defaults (RegisterTenants)
//	spendgate_build_info                  gauge      version, commit, go_version   always 1
//
// Where each is recorded:
//
//   - requests, request duration, in-flight: around the handler call in
//     the service's reply path (Inflight.Inc/Dec around it, then
//     ObserveRequest with the reply's code);
//   - admits: after the admitter's decision, from AdmitReply.Admitted and
//     Denial.Reason;
//   - ledger busy: where the in-flight limit refuses (BusyInflight) and
//     where the commit path gives up after its compare-and-set attempts
//     (BusyConflicts);
//   - commits, commit txs, CAS conflicts: in the commit path, next to the
//     ledger's own Stats counters (a successful write: Commits.Inc and
//     CommitTxs.Observe(len(group)); a conflict: CASConflicts.Inc);
//   - sweeper released: the count returned by each sweep pass;
//   - follower lag: the NumPending of the last message the follower
//     folded (jetstream.MsgMetadata), kept in an atomic;
//   - per-budget gauges: one read of the book's balances of the current
//     period per scrape;
//   - per-tenant: TenantLimited where a request is refused tenant_limit
//     (internal/service) or a denial record is left out (its recorder),
//     TenantUnknownScopeDenial where an admit is denied unknown_budget, and
//     the gauges one read of the book's per-tenant counts per scrape.
//
// RegisterAlerts adds the replica's alert publisher counters
// (spendgate_alerts_published_total, _duplicate_total, _dropped_total,
// _failed_total, _forged_total); the webhook sink (spendgate alerts webhook) serves its
// own AlertSink (spendgate_alert_webhook_deliveries_total,
// _failures_total{reason}, _undelivered_total). See docs/alerts.md.
//
// Label values come from bounded sets (endpoint names, reply codes, denial
// reasons); the per-budget gauges are bounded by RegisterBudgets' limit,
// keeping the budgets nearest their limit; the tenant label names at most
// MaxTenantSeries tenants per family (the counters the first ones counted,
// the rest under TenantOther; the gauges those with the most open
// reservations).
package metrics
