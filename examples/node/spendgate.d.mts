// Types for spendgate.mjs: the client's surface and the wire's shapes (the
// full wire reference is docs/wire.md). Amounts are decimal strings, never
// numbers: a binary float is refused (invalid_amount) or off by a cent.
import type { NatsConnection } from "@nats-io/transport-node";

/** A decimal amount as a string: "0.05". */
export type Decimal = string;
export type Period = "minute" | "hour" | "day" | "week" | "month" | "lifetime";

export interface ErrorBody {
  code: string;
  message: string;
  reservation_id?: string;
  status?: string;
}

/** An error reply: a refusal with a stable code (invalid_amount, unknown_reservation, ...). */
export class SpendgateError extends Error {
  constructor(body: ErrorBody);
  code: string;
  body: ErrorBody;
}

/**
 * The outcome is unknown: fail closed. code is "ledger_unavailable" when no
 * answer came, else the last answer's code.
 */
export class UnavailableError extends Error {
  constructor(cause: Error, code?: string);
  code: string;
  /** admit: the void's reply, undefined if the void got no answer either. */
  voided?: VoidReply;
  /** settle, release: the reply of the same close sent again, once it lands (rule 4). */
  retrying?: Promise<CloseReply>;
}

export interface SpendgateOptions {
  /** Subject prefix, default "spendgate." ("spendgate.t.<tenant>." is a tenant's). */
  prefix?: string;
  /** Per attempt, default 2000. */
  timeoutMs?: number;
  /** Attempts per request, default 3. */
  attempts?: number;
  /** How long a settle or release whose outcome is unknown is sent again, default 48 hours. */
  closeRetryMs?: number;
  /** The first wait before it is, default 1000 (doubling up to 30 s). */
  closeBackoffMs?: number;
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

export class Spendgate {
  constructor(nc: NatsConnection, opts?: SpendgateOptions);
  nc: NatsConnection;
  prefix: string;
  timeoutMs: number;
  attempts: number;
  closeRetryMs: number;
  closeBackoffMs: number;
  /** Any endpoint ("budget.get", ...): the reply, or SpendgateError, or UnavailableError. */
  request<T = unknown>(endpoint: string, body: unknown): Promise<T>;
  admit(req: AdmitRequest): Promise<AdmitReply>;
  void(requestId: string, scopes: string[]): Promise<VoidReply>;
  /** Settles with the actual cost; kept and sent again, same body, while its outcome is unknown (rule 4). */
  settle(reservationId: string, actual: Decimal, opts?: SettleOptions): Promise<CloseReply>;
  /** Settles a reservation priced from a model from its usage: sg.settle(id, undefined, { usage }). */
  settle(reservationId: string, actual: undefined, opts: SettleUsageOptions): Promise<CloseReply>;
  release(reservationId: string): Promise<CloseReply>;
  putBudget(budget: BudgetPutRequest): Promise<BudgetPutReply>;
  /** How many settles and releases are being sent again. */
  readonly owed: number;
  /** Waits until every settle and release being sent again has landed or given up. */
  drain(): Promise<void>;
}
