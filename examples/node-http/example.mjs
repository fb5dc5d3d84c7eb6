// The HTTP API from Node.js, walked through against a live `spendgate gateway`:
// a budget, an admit and its replay, a denial, a settle, refusals, a void, and
// the budget's retirement.
//
//   SPENDGATE_HTTP=http://127.0.0.1:8080 SPENDGATE_KEY=sgk_... node example.mjs
//
// The key needs --access admin (it puts a budget); a service that only admits
// and settles uses a key with --access service.
import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import { SpendgateError, SpendgateHTTP } from "./spendgate-http.mjs";

/** walkthrough runs every step and returns their answers; log prints each. */
export async function walkthrough(sg, log = console.log) {
  const out = {};
  const scope = `org:node-http-${randomUUID().slice(0, 8)}`;
  out.budget = await sg.putBudget({ scope, period: "month", limit: "1.00", unit: "USD" });
  log("budget.put", out.budget.scope, "limit", out.budget.limit);

  // Rule 1: the request id is made once and reused by every retry.
  const requestId = randomUUID();
  out.admit = await sg.admit({ request_id: requestId, scopes: [scope], amount: "0.60", ttl: "1m" });
  log("admit 0.60:", out.admit.admitted, out.admit.reservation_id);
  // A lost reply's retry: the same body again, marked as a retry.
  out.replay = await sg.request("admit", { request_id: requestId, scopes: [scope], amount: "0.60", ttl: "1m", retry: true });
  log("the same admit again:", "replayed", out.replay.replayed);

  // A denial is an answer (200, admitted false), not an error.
  out.denied = await sg.admit({ scopes: [scope], amount: "0.60" });
  log("a second admit of 0.60:", out.denied.admitted, out.denied.denial.reason, "resets at", out.denied.denial.resets_at);

  out.settle = await sg.settle(out.admit.reservation_id, "0.50");
  log("settle 0.50:", out.settle.status, out.settle.actual);
  out.settleAgain = await sg.settle(out.admit.reservation_id, "0.40").catch((err) => err);
  log("settle again with another actual:", out.settleAgain.status, out.settleAgain.code);

  // Refusals are SpendgateErrors with a stable code and the HTTP status.
  out.invalid = await sg.admit({ scopes: [scope], amount: "-1" }).catch((err) => err);
  log("a negative amount:", out.invalid.status, out.invalid.code);
  out.unknown = await sg.release("rsv_00000000-0000-0000-0000-000000000000").catch((err) => err);
  log("release of an unknown reservation:", out.unknown.status, out.unknown.code);

  // Rule 3: void what you gave up on (here, an admit that never landed).
  out.void = await sg.void(randomUUID(), [scope]);
  log("void of an admit that never landed:", out.void.status);

  out.after = await sg.getBudget(scope, "month");
  log("budget.get: spent", out.after.spent, "reserved", out.after.reserved, "available", out.after.available);

  // A scope that is over (an agent run, a job) is retired: every later
  // admit naming it is denied, and its budget leaves the ledger's memory.
  out.retired = await sg.retireBudget(scope, "month", "walkthrough over");
  log("budget.retire:", out.retired.retired);
  out.afterRetire = await sg.admit({ scopes: [scope], amount: "0.01" });
  log("an admit after it:", out.afterRetire.admitted, out.afterRetire.denial.reason);
  return out;
}

if (process.argv[1] === fileURLToPath(import.meta.url) && !process.env.SPENDGATE_KEY) {
  console.error("SPENDGATE_KEY is not set: make one with `spendgate keys create --access admin --secret-only`");
  process.exitCode = 64;
} else if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const sg = new SpendgateHTTP({
    baseUrl: process.env.SPENDGATE_HTTP ?? "http://127.0.0.1:8080",
    key: process.env.SPENDGATE_KEY,
  });
  try {
    await walkthrough(sg);
  } catch (err) {
    console.error(err instanceof SpendgateError ? `refused: ${err.status} ${err.code}: ${err.message}` : err);
    process.exitCode = 1;
  } finally {
    await sg.drain(); // rule 4: what is owed lands (or gives up) before exiting
  }
}
