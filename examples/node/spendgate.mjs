// A small spendgate client for Node.js: JSON over NATS request-reply, with the
// three rules every caller in any language must keep.
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
  /**
   * @param nc a connection from @nats-io/transport-node's connect()
   * @param opts prefix (default "spendgate."), timeoutMs per attempt
   *        (default 2000), attempts (default 3)
   */
  constructor(nc, { prefix = "spendgate.", timeoutMs = 2000, attempts = 3 } = {}) {
    this.nc = nc;
    this.prefix = prefix;
    this.timeoutMs = timeoutMs;
    this.attempts = attempts;
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
    const body = { request_id: req.request_id ?? randomUUID(), ...req };
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

  settle(reservationId, actual) {
    return this.request("settle", { reservation_id: reservationId, actual });
  }

  release(reservationId) {
    return this.request("release", { reservation_id: reservationId });
  }

  putBudget(budget) {
    return this.request("budget.put", budget);
  }
}

function isRetryable(err) {
  if (err instanceof errors.TimeoutError) return true;
  if (err instanceof errors.RequestError) {
    // No responders: no replica is subscribed right now (a restart); retry.
    return err.isNoResponders() || err.cause instanceof errors.TimeoutError;
  }
  return false;
}
