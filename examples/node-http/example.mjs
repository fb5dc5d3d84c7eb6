// The HTTP API from Node.js, walked through against a live `spendgate gateway`:
// a budget, an admit and its replay, a denial, a settle, refusals, a void, a
// model call settled from its usage, and the budget's retirement.
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

  // A model call, priced from the pricing table (the model is this run's, so
  // no real model's price changes): the admit reserves the most it can cost,
  // 1200 input tokens and up to 800 output, and the settle gives what it
  // used, priced at the admit's price version, with a note on how the actual
  // was known (the settle's events and the export keep it).
  const model = `node-http-${scope.slice(-8)}`;
  out.price = await sg.request("pricing.put", { model, input: "2.50", output: "10", cached_input: "1.25" });
  out.priced = await sg.admit({ scopes: [scope], model, input_tokens: 1200, max_output_tokens: 800 });
  log(`admit ${model}:`, out.priced.admitted, "reserved", out.priced.amount);
  const usage = { input_tokens: 1200, cached_input_tokens: 1000, output_tokens: 640 };
  out.usageSettle = await sg.settle(out.priced.reservation_id, undefined, { usage, note: "provider_usage" });
  log("settle from usage:", out.usageSettle.status, out.usageSettle.actual);
  // Rule 4 sends the same body again when a reply is lost: it is replayed.
  out.usageAgain = await sg.settle(out.priced.reservation_id, undefined, { usage, note: "provider_usage" });
  log("the same settle again: replayed", out.usageAgain.replayed, out.usageAgain.actual);

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
