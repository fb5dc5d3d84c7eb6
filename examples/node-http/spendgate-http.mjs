// A spendgate client for Node.js over the HTTP API (POST /spendgate/<endpoint>,
// served by `spendgate gateway`), on the built-in fetch: no dependencies, for
// code that cannot hold a NATS connection (serverless functions, edge runtimes,
// short-lived jobs). The bodies and error codes are the NATS API's; a key made
// with `spendgate keys create --access service` (admit, settle, release, void,
// reads) or `--access admin` (also budget.put, budget.retire and pricing.put) is the bearer
// token. Its TypeScript types are in spendgate-http.d.mts. It keeps the four
// rules every caller in any language must keep:
//
//  1. Make the request id before the first attempt and reuse it on every retry:
//     a retried admit whose first reply was lost gets the original answer
//     ("replayed": true) and reserves once. Mark an admit's retries
//     ("retry": true): the first attempt may still commit, so the service
//     never denies a retry (it answers ledger_unavailable instead).
//  2. Fail closed: no answer in time, a connection that failed, a 5xx without
//     a spendgate body (a load balancer's), or ledger_busy, ledger_unavailable
//     or internal after the retries: treat the call as denied. Never call the
//     paid upstream without an admit.
//  3. Void what you gave up on: before reporting such a denial, send void with
//     the admit's request id and scopes, so an admit that landed is released at
//     once and one still in flight reserves nothing.
//  4. Keep a settle (or release) whose outcome is unknown and send it again,
//     same body, until it lands: it is idempotent, and the ledger takes a settle
//     up to 48 hours after the reservation's expiry. Dropped, the call's spend
//     is never recorded and the sweeper gives its room back at the expiry.
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

/** SpendgateError is an error reply: {"error":{"code","message",...}}, with the HTTP status. */
export class SpendgateError extends Error {
  constructor(body, status) {
    super(`${body.code}: ${body.message}`);
    this.name = "SpendgateError";
    this.code = body.code;
    this.status = status;
    this.body = body;
  }
}

/**
 * UnavailableError means the outcome is unknown: no answer in time, or an
 * answer that decided nothing (ledger_busy, ledger_unavailable, internal, a
 * 5xx from something in between). Fail closed. code is "ledger_unavailable"
 * when no spendgate answer came, else the last answer's code.
 */
export class UnavailableError extends Error {
  constructor(cause, code = "ledger_unavailable") {
    super(`${code}: ${cause.message}`, { cause });
    this.name = "UnavailableError";
    this.code = code;
  }
}

// Error codes that decided nothing: ledger_busy and ledger_unavailable invite
// a retry of the same request; internal does not (the Go client's rules).
const retryCodes = new Set(["ledger_busy", "ledger_unavailable"]);
const unknownCodes = new Set([...retryCodes, "internal"]);

export class SpendgateHTTP {
  /** owed holds the settles and releases being sent again (rule 4). */
  #owed = new Set();
  /** stop is aborted by close(): what is owed stops being sent again. */
  #stop = new AbortController();

  /**
   * @param opts baseUrl (the gateway, "http://127.0.0.1:8080"), key (the
   *        bearer token, sgk_...), timeoutMs per attempt (default 2000),
   *        attempts (default 3), closeRetryMs: how long a settle or release
   *        whose outcome is unknown is sent again (default 48 hours),
   *        closeBackoffMs: the first wait before it is (default 1000, doubling
   *        up to 30 s), fetch (default globalThis.fetch)
   */
  constructor({ baseUrl, key, timeoutMs = 2000, attempts = 3, closeRetryMs = 48 * 3600 * 1000, closeBackoffMs = 1000, fetch = globalThis.fetch }) {
    if (!baseUrl || !key) throw new TypeError("SpendgateHTTP: baseUrl and key are required");
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.key = key;
    this.timeoutMs = timeoutMs;
    this.attempts = attempts;
    this.closeRetryMs = closeRetryMs;
    this.closeBackoffMs = closeBackoffMs;
    this.fetch = fetch;
  }

  /**
   * post sends body to endpoint once and returns its reply, or throws a
   * SpendgateError for an error reply; a failed connection, a timeout or a
   * 5xx without a spendgate body throws what fetch threw or a plain Error
   * (the outcome is unknown).
   */
  async post(endpoint, body) {
    const res = await this.fetch(`${this.baseUrl}/spendgate/${endpoint}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${this.key}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    const text = await res.text();
    let reply;
    try {
      reply = JSON.parse(text);
    } catch {
      reply = undefined;
    }
    if (reply?.error?.code) throw new SpendgateError(reply.error, res.status);
    if (res.ok && reply !== undefined) return reply;
    const err = new Error(`HTTP ${res.status} from ${endpoint}: ${text.slice(0, 200)}`);
    err.status = res.status;
    err.unknown = res.status >= 500; // a proxy's 502 or 504: the request may have landed
    throw err;
  }

  /**
   * request sends body to endpoint, retrying the same request (an admit
   * marked "retry") when the outcome is unknown and a retry may settle it:
   * no answer, a failed connection, a 5xx without a spendgate body,
   * ledger_busy or ledger_unavailable. Giving up after one attempt would
   * leave an admit unvoided or a settle unrecorded.
   */
  async request(endpoint, body) {
    let payload = body;
    let last;
    for (let i = 0; i < this.attempts; i++) {
      if (i === 1 && endpoint === "admit") payload = { ...body, retry: true };
      try {
        return await this.post(endpoint, payload);
      } catch (err) {
        if (err instanceof SpendgateError) {
          if (!unknownCodes.has(err.code)) throw err; // a refusal: nothing to retry
          if (!retryCodes.has(err.code)) throw new UnavailableError(err, err.code);
        } else if (err.status !== undefined && !err.unknown) {
          throw err; // a 4xx that is not spendgate's: a wrong URL, say
        }
        last = err; // same body, same request id: the ledger deduplicates
        if (i + 1 < this.attempts) await sleep(100 * (i + 1));
      }
    }
    throw new UnavailableError(last, last instanceof SpendgateError ? last.code : undefined);
  }

  /**
   * admit reserves; the request id is made here once unless the caller gives
   * one. A denial is a reply ({"admitted": false, "denial": {...}}), not an
   * error. If the outcome stays unknown (UnavailableError), the request id is
   * voided before the error is thrown; err.voided holds the void's reply, or
   * is undefined if the void got no answer either.
   */
  async admit(req) {
    const body = { ...req, request_id: req.request_id ?? randomUUID() };
    try {
      return await this.request("admit", body);
    } catch (err) {
      if (err instanceof UnavailableError) {
        err.voided = await this.void(body.request_id, body.scopes).catch(() => undefined);
      }
      throw err;
    }
  }

  /** void voids an admit by its request id, with the admit's scopes. */
  void(requestId, scopes) {
    return this.request("void", { request_id: requestId, scopes });
  }

  /**
   * settle closes a reservation with its actual cost, a decimal string. If
   * its outcome stays unknown (UnavailableError), the settle is kept and sent
   * again in the background, the same body, until it lands, is refused,
   * close() is called or closeRetryMs passes (rule 4); the error is thrown
   * all the same, with err.retrying the promise of that settle's reply.
   * drain() waits for every settle and release being sent again: call it
   * before exiting.
   *
   * opts.usage settles a reservation priced from a model (an admit with
   * model) from what the call used instead: actual undefined and usage
   * {input_tokens, output_tokens, cached_input_tokens}, the wire's names
   * (cached_input_tokens, the part of input_tokens that was cached, may be
   * left out). The ledger prices it at the admit's price version: the reply's
   * actual is the cost, its usage the counts and price_version. Usage with
   * every count 0 is refused (invalid_amount): settle such a call with
   * actual "0". opts.note is one word on how the actual was known
   * ("estimate", "invoice": 1-32 letters, digits, _ and -), recorded in the
   * settle's events and the export. A refusal (400 invalid_request for actual
   * and usage both, or a bad note; 400 not_priced for usage of a reservation
   * not priced from a model) is a SpendgateError, never sent again.
   *
   *     await sg.settle(id, "0.35", { note: "invoice" });
   *     await sg.settle(id, undefined, { usage: { input_tokens: 1200, output_tokens: 640 } });
   */
  settle(reservationId, actual, { usage, note } = {}) {
    return this.#close("settle", settleBody(reservationId, actual, usage, note));
  }

  /** release gives the whole reservation back; kept and sent again as settle is. */
  release(reservationId) {
    return this.#close("release", { reservation_id: reservationId });
  }

  /** owed is how many settles and releases are being sent again. */
  get owed() {
    return this.#owed.size;
  }

  /** drain waits until every settle and release being sent again has landed or given up. */
  async drain() {
    await Promise.allSettled([...this.#owed]);
  }

  /** close stops sending again what is owed: each such promise rejects at once. */
  close() {
    this.#stop.abort();
  }

  async #close(endpoint, body) {
    try {
      return await this.request(endpoint, body);
    } catch (err) {
      if (err instanceof UnavailableError) {
        const retrying = this.#closeAgain(endpoint, body);
        this.#owed.add(retrying);
        retrying.then(() => this.#owed.delete(retrying), () => this.#owed.delete(retrying));
        err.retrying = retrying;
      }
      throw err;
    }
  }

  async #closeAgain(endpoint, body) {
    const deadline = Date.now() + this.closeRetryMs;
    for (let wait = this.closeBackoffMs; ; wait = Math.min(2 * wait, 30_000)) {
      await sleep(Math.min(wait, Math.max(0, deadline - Date.now())), undefined, { signal: this.#stop.signal }).catch(() => {});
      if (this.#stop.signal.aborted) throw new UnavailableError(new Error(`the client is closed: the ${endpoint} of ${body.reservation_id} is not recorded`));
      try {
        return await this.request(endpoint, body);
      } catch (err) {
        if (!(err instanceof UnavailableError) || Date.now() >= deadline) throw err;
      }
    }
  }

  putBudget(budget) {
    return this.request("budget.put", budget);
  }

  getBudget(scope, period) {
    return this.request("budget.get", { scope, period });
  }

  // retireBudget retires a budget for good (an agent run's, once the run is
  // over): every later admit naming its scope is denied budget_retired. An
  // admin key's; retiring it again answers "already": true.
  retireBudget(scope, period, reason) {
    return this.request("budget.retire", reason ? { scope, period, reason } : { scope, period });
  }
}

// settleBody is a settle's body, made once: every attempt sends it. Of
// usage only the three counts go (the wire refuses a field it does not
// know); a field left undefined is left out of the JSON.
function settleBody(reservationId, actual, usage, note) {
  const body = { reservation_id: reservationId, actual };
  if (usage) {
    body.input_tokens = usage.input_tokens;
    body.output_tokens = usage.output_tokens;
    body.cached_input_tokens = usage.cached_input_tokens;
  }
  body.note = note;
  return body;
}
