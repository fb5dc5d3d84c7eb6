// A small spendgate client for Node.js: JSON over NATS request-reply, with the
// four rules every caller in any language must keep.
//
//  1. Make the request id before the first attempt and reuse it on every retry:
//     a retried admit whose first reply was lost gets the original answer
//     ("replayed": true) and reserves once. Mark an admit's retries
//     ("retry": true): the first attempt may still commit, so the service
//     never denies a retry (it answers ledger_unavailable instead).
//  2. Fail closed: if the ledger cannot be reached, does not answer in time, or
//     answers ledger_busy, ledger_unavailable or internal after the retries,
//     treat the call as denied. Never call the paid upstream without an admit.
//  3. Void what you gave up on: before reporting such a denial, send
//     spendgate.void with the admit's request id and scopes, so an admit that
//     landed is released at once and one still in flight reserves nothing.
//  4. Keep a settle (or release) whose outcome is unknown and send it again,
//     same body, until it lands: it is idempotent, and the ledger takes a settle
//     up to 48 hours after the reservation's expiry. Dropped, the call's spend
//     is never recorded and the sweeper gives its room back at the expiry.
import { randomUUID } from "node:crypto";
import { errors } from "@nats-io/transport-node";

/** SpendgateError is an error reply: {"error":{"code","message",...}}. */
export class SpendgateError extends Error {
  constructor(body) {
    super(`${body.code}: ${body.message}`);
    this.name = "SpendgateError";
    this.code = body.code;
    this.body = body;
  }
}

/**
 * UnavailableError means the outcome is unknown: no answer in time, or an
 * answer that decided nothing (ledger_busy, ledger_unavailable, internal).
 * Fail closed. code is "ledger_unavailable" when no answer came, else the
 * last answer's code.
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

export class Spendgate {
  /** owed holds the settles and releases being sent again (rule 4). */
  #owed = new Set();

  /**
   * @param nc a connection from @nats-io/transport-node's connect()
   * @param opts prefix (default "spendgate."), timeoutMs per attempt
   *        (default 2000), attempts (default 3), closeRetryMs: how long a
   *        settle or release whose outcome is unknown is sent again (default
   *        48 hours), closeBackoffMs: the first wait before it is (default
   *        1000, doubling up to 30 s)
   */
  constructor(nc, { prefix = "spendgate.", timeoutMs = 2000, attempts = 3, closeRetryMs = 48 * 3600 * 1000, closeBackoffMs = 1000 } = {}) {
    this.nc = nc;
    this.prefix = prefix;
    this.timeoutMs = timeoutMs;
    this.attempts = attempts;
    this.closeRetryMs = closeRetryMs;
    this.closeBackoffMs = closeBackoffMs;
  }

  /**
   * request sends body to endpoint, retrying the same request (an admit
   * marked "retry") on a timeout, no responders, ledger_busy or
   * ledger_unavailable: each leaves the outcome unknown, so giving up on it
   * after one attempt would leave an admit unvoided or a settle unrecorded.
   */
  async request(endpoint, body) {
    let payload = JSON.stringify(body);
    let last;
    for (let i = 0; i < this.attempts; i++) {
      if (i === 1 && endpoint === "admit") payload = JSON.stringify({ ...body, retry: true });
      try {
        const msg = await this.nc.request(this.prefix + endpoint, payload, { timeout: this.timeoutMs });
        const reply = msg.json();
        if (reply.error) throw new SpendgateError(reply.error);
        return reply;
      } catch (err) {
        if (err instanceof SpendgateError) {
          if (!unknownCodes.has(err.code)) throw err; // a refusal: nothing to retry
          if (!retryCodes.has(err.code)) throw new UnavailableError(err, err.code);
        } else if (!isRetryable(err)) {
          throw new UnavailableError(err);
        }
        last = err; // same payload, same request id: the ledger deduplicates
        if (i + 1 < this.attempts) await new Promise((r) => setTimeout(r, 100 * (i + 1)));
      }
    }
    throw new UnavailableError(last, last instanceof SpendgateError ? last.code : undefined);
  }

  /**
   * admit reserves; the request id is made here once unless the caller gives
   * one. If its outcome stays unknown (UnavailableError), the request id is
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
   * again in the background, the same body, until it lands, is refused, the
   * connection is closed or closeRetryMs passes (rule 4); the error is thrown
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
   * settle's events and the export. A refusal (invalid_request for actual
   * and usage both, or a bad note; not_priced for usage of a reservation
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
      await new Promise((r) => setTimeout(r, Math.min(wait, Math.max(0, deadline - Date.now()))));
      if (this.nc.isClosed()) throw new UnavailableError(new Error(`the connection is closed: the ${endpoint} of ${body.reservation_id} is not recorded`));
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

function isRetryable(err) {
  if (err instanceof errors.TimeoutError) return true;
  if (err instanceof errors.RequestError) {
    // No responders: no replica is subscribed right now (a restart); retry.
    return err.isNoResponders() || err.cause instanceof errors.TimeoutError;
  }
  return false;
}
