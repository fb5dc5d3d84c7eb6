// Types for spendgate-http.mjs: the client's surface and the wire's shapes.
// The HTTP API's bodies are the wire's JSON (docs/wire.md; the HTTP API is in
// docs/gateway.md), so the shapes below are examples/node/spendgate.d.mts's,
// kept the same (example.test.mjs checks they are). Amounts are decimal
// strings, never numbers: a binary float is refused (invalid_amount) or off
// by a cent.

/** A decimal amount as a string: "0.05". */
export type Decimal = string;
export type Period = "minute" | "hour" | "day" | "week" | "month" | "lifetime";

export interface ErrorBody {
  code: string;
  message: string;
  reservation_id?: string;
  status?: string;
}

/**
 * An error reply, {"error":{"code","message",...}}, with its HTTP status: a
 * refusal with a stable code, never retried. The wire's codes come with the
 * statuses docs/wire.md's conventions give (404 unknown_budget,
 * unknown_reservation, ...; 409 already_settled, already_released,
 * budget_retired, ...; 413 payload_too_large; 429 tenant_limit; 400 the
 * others: invalid_amount, invalid_request, not_priced, ...); the HTTP
 * layer's own are unauthorized (401: no key, or an unknown one),
 * key_disabled (401), forbidden (403: the key's access does not reach the
 * endpoint), not_found (404: no such endpoint), method_not_allowed (405)
 * and too_many_unknown_keys (429, with Retry-After).
 */
export class SpendgateError extends Error {
  constructor(body: ErrorBody, status: number);
  code: string;
  status: number;
  body: ErrorBody;
}

/**
 * The outcome is unknown: fail closed. code is "ledger_unavailable" when no
 * spendgate answer came (no answer in time, a failed connection, a 5xx from
 * something in between), else the last answer's code (ledger_busy,
 * ledger_unavailable, internal).
 */
export class UnavailableError extends Error {
  constructor(cause: Error, code?: string);
  code: string;
  /** admit: the void's reply, undefined if the void got no answer either. */
  voided?: VoidReply;
  /** settle, release: the reply of the same close sent again, once it lands (rule 4). */
  retrying?: Promise<CloseReply>;
}

/**
 * What post() throws for an HTTP answer without a spendgate body, such as a
 * wrong base URL's 404 or a load balancer's 502: a plain Error with status
 * (not a class of its own: test err.status). unknown is true for a 5xx, when
 * the request may have landed: request() sends it again as it does
 * ledger_unavailable, and throws UnavailableError after its attempts, so
 * request() and the methods throw this only for a 4xx.
 */
export interface HTTPStatusError extends Error {
  status: number;
  unknown: boolean;
}

export interface SpendgateHTTPOptions {
  /** The gateway's address, "http://127.0.0.1:8080" (the API is under /spendgate/). */
  baseUrl: string;
  /**
   * The bearer token, sgk_...: a key made with `spendgate keys create
   * --access service` (admit, settle, release, void, reads) or
   * `--access admin` (also budget.put, budget.retire and pricing.put).
   */
  key: string;
  /** Per attempt, default 2000. */
  timeoutMs?: number;
  /** Attempts per request, default 3. */
  attempts?: number;
  /** How long a settle or release whose outcome is unknown is sent again, default 48 hours. */
  closeRetryMs?: number;
  /** The first wait before it is, default 1000 (doubling up to 30 s). */
  closeBackoffMs?: number;
  /** Default globalThis.fetch. */
  fetch?: typeof fetch;
}

export interface AdmitRequest {
  /** Made once by admit() when left out; reuse it on every retry. */
  request_id?: string;
  scopes: string[];
  /** Required unless model prices the request. */
  amount?: Decimal;
  unit?: string;
  /** A Go duration: "30s", "5m", "1h30m". */
  ttl?: string;
  metadata?: Record<string, string>;
  mode?: "admit" | "check" | "shadow";
  count?: number;
  brief?: boolean;
  model?: string;
  input_tokens?: number;
  input_chars?: number;
  max_output_tokens?: number;
  retry?: boolean;
}

export interface BalanceRef {
  scope: string;
  period: Period;
  instance: string;
  unit?: string;
}

export interface BudgetUse extends BalanceRef {
  unit: string;
  limit: Decimal;
  amount: Decimal;
  spent: Decimal;
  reserved: Decimal;
  available: Decimal;
}

/**
 * Why an admit was denied: every reason a replica denies with (events.DenialReasons
 * in the Go code; docs/wire.md lists what each means). The Go client also makes
 * ledger_unavailable denials itself; this client throws UnavailableError
 * instead.
 */
export type DenialReason =
  | "limit_reached"
  | "unknown_budget"
  | "unit_mismatch"
  | "budget_disabled"
  | "budget_retired"
  | "unpriced_model"
  | "exposure_cap"
  // Any other string (a reason a later version adds); "& {}" keeps the
  // names above in an editor's completions, which a plain "| string" loses.
  | (string & {});

export interface Denial {
  reason: DenialReason;
  message: string;
  scope: string;
  period?: Period;
  instance?: string;
  unit?: string;
  limit?: Decimal;
  spent?: Decimal;
  reserved?: Decimal;
  requested?: Decimal;
  model?: string;
  /** When the blocking budget's period instance ends (RFC 3339, UTC); absent when a reset does not help. */
  resets_at?: string;
}

export interface PriceQuote {
  model: string;
  version: number;
  unit: string;
  input: Decimal;
  output: Decimal;
  cached_input?: Decimal;
  input_tokens: number;
  max_output_tokens: number;
}

/** A denial is a reply (admitted false, denial set), not an error. */
export interface AdmitReply {
  admitted: boolean;
  request_id: string;
  reservation_id?: string;
  amount?: Decimal;
  unit?: string;
  balances?: BalanceRef[];
  expires_at?: string;
  status?: "open" | "settled" | "released" | "expired";
  replayed?: boolean;
  denial?: Denial;
  mode?: "check" | "shadow";
  budgets?: BudgetUse[];
  pricing?: PriceQuote;
}

export interface BudgetClose extends BalanceRef {
  unit: string;
  reserved: Decimal;
  actual: Decimal;
  overrun?: Decimal;
  excess?: Decimal;
}

/** What a call priced from a model used: the wire's names. */
export interface SettleUsage {
  input_tokens: number;
  output_tokens: number;
  /** The part of input_tokens that was cached (priced at cached_input); at most input_tokens. */
  cached_input_tokens?: number;
}

export interface SettleOptions {
  /**
   * One word on how the actual was known ("estimate", "invoice"): 1-32 of
   * letters, digits, "_" and "-", else invalid_request. Recorded in the
   * settle's events (reservation.settled.v1 note) and the export
   * (settle_note); it changes nothing else.
   */
  note?: string;
  /** Only with actual undefined: see SettleUsageOptions. */
  usage?: never;
}

/**
 * Settles a reservation priced from a model (an admit with model) from its
 * usage: the ledger prices it at the admit's price version (not_priced for
 * a reservation that was not). Every count 0 is refused (invalid_amount):
 * settle such a call with actual "0".
 */
export interface SettleUsageOptions {
  usage: SettleUsage;
  note?: string;
}

export interface CloseReply {
  reservation_id: string;
  /** expired: a release of a reservation the sweeper released at its expiry. */
  status: "settled" | "released" | "expired";
  reserved: Decimal;
  actual?: Decimal;
  overrun?: Decimal;
  excess?: Decimal;
  late?: boolean;
  balances: BalanceRef[];
  replayed?: boolean;
  /** A settle from usage: the counts and the price version actual was computed at (a replay of it says them too). */
  usage?: SettleUsage & { price_version: number };
  budgets?: BudgetClose[];
}

export interface VoidReply {
  request_id: string;
  status: string;
  reservation_id?: string;
  reservation_status?: string;
  reserved?: Decimal;
  balances?: BalanceRef[];
  replayed?: boolean;
}

export interface BudgetPutRequest {
  scope: string;
  period: Period;
  limit?: Decimal;
  unit?: string;
  tz?: string;
  disabled?: boolean;
  allow_zero?: boolean;
  fixed_slot?: Decimal;
  alerts?: boolean;
  thresholds?: string[];
  exposure_cap?: Decimal;
  learn?: string;
  learn_window?: number;
  learn_min_samples?: number;
  learn_floor?: Decimal;
  replace?: boolean;
}

export interface BudgetView {
  scope: string;
  period: Period;
  limit: Decimal;
  unit: string;
  instance: string;
  spent: Decimal;
  reserved: Decimal;
  overrun: Decimal;
  available: Decimal;
  open: number;
  tz?: string;
  disabled?: boolean;
  retired?: boolean;
  /** RFC 3339, UTC. */
  retired_at?: string;
  retired_reason?: string;
  fixed_slot?: Decimal;
  max_in_flight?: Decimal;
  overshoot_bound?: Decimal;
  thresholds?: string[];
  exposure?: Decimal;
  exposure_cap?: Decimal;
  learn?: string;
}

export interface BudgetPutReply extends BudgetView {
  created?: boolean;
  changed: string[];
}

/** A budget as retired; already: it was retired before this request (nothing was written). */
export interface BudgetRetireReply extends BudgetView {
  already?: boolean;
}

export class SpendgateHTTP {
  constructor(opts: SpendgateHTTPOptions);
  baseUrl: string;
  key: string;
  timeoutMs: number;
  attempts: number;
  closeRetryMs: number;
  closeBackoffMs: number;
  fetch: typeof fetch;
  /** One attempt at any endpoint: the reply, or SpendgateError, or what fetch threw, or an HTTPStatusError. */
  post<T = unknown>(endpoint: string, body: unknown): Promise<T>;
  /** Any endpoint ("pricing.put", "budget.list", ...), retried while the outcome is unknown: the reply, or SpendgateError, or UnavailableError. */
  request<T = unknown>(endpoint: string, body: unknown): Promise<T>;
  admit(req: AdmitRequest): Promise<AdmitReply>;
  void(requestId: string, scopes: string[]): Promise<VoidReply>;
  /** Settles with the actual cost; kept and sent again, same body, while its outcome is unknown (rule 4). */
  settle(reservationId: string, actual: Decimal, opts?: SettleOptions): Promise<CloseReply>;
  /** Settles a reservation priced from a model from its usage: sg.settle(id, undefined, { usage }). */
  settle(reservationId: string, actual: undefined, opts: SettleUsageOptions): Promise<CloseReply>;
  release(reservationId: string): Promise<CloseReply>;
  /** How many settles and releases are being sent again. */
  readonly owed: number;
  /** Waits until every settle and release being sent again has landed or given up. */
  drain(): Promise<void>;
  /** Stops sending again what is owed: each such promise rejects at once. */
  close(): void;
  /** An admin key's. */
  putBudget(budget: BudgetPutRequest): Promise<BudgetPutReply>;
  /** One budget of the scope, by its period. */
  getBudget(scope: string, period: Period): Promise<BudgetView>;
  /** Every budget of the scope. */
  getBudget(scope: string): Promise<{ budgets: BudgetView[] }>;
  /** An admin key's: every later admit naming the scope is denied budget_retired. */
  retireBudget(scope: string, period: Period, reason?: string): Promise<BudgetRetireReply>;
}
