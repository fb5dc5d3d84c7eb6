// The spendgate walk-through for Node.js. With `spendgate serve` running:
//
//     cd examples/node && npm install && node example.mjs
//
// NATS_URL selects the server (default nats://127.0.0.1:4222).
import { randomUUID } from "node:crypto";
import { connect } from "@nats-io/transport-node";
import { Spendgate, SpendgateError, UnavailableError } from "./spendgate.mjs";

export async function walkthrough(nc, log = console.log) {
  const sg = new Spendgate(nc);
  const scope = `org:node-${randomUUID().slice(0, 8)}`;
  const out = {};

  // 1. A budget: 1.00 USD a month for this scope.
  out.budget = await sg.putBudget({ scope, period: "month", limit: "1.00", unit: "USD" });
  log(`budget ${scope}: limit ${out.budget.limit} ${out.budget.unit}`);

  // 2. Admit 0.40 before calling the upstream, then settle what it cost.
  out.admit = await sg.admit({ scopes: [scope], amount: "0.40", ttl: "30s", metadata: { model: "gpt-x" } });
  log(`admitted ${out.admit.admitted}: reservation ${out.admit.reservation_id}`);
  out.settle = await sg.settle(out.admit.reservation_id, "0.35");
  log(`${out.settle.status}: actual ${out.settle.actual} of ${out.settle.reserved} reserved`);

  // 3. A denial is a reply, not an error: 0.35 spent, 0.80 does not fit.
  out.denied = await sg.admit({ scopes: [scope], amount: "0.80" });
  log(`admitted ${out.denied.admitted}: ${out.denied.denial.reason}: ${out.denied.denial.message}`);

  // 4. An error reply: a bad amount is refused with a stable code.
  try {
    await sg.admit({ scopes: [scope], amount: "-1" });
  } catch (err) {
    if (!(err instanceof SpendgateError)) throw err;
    out.errorCode = err.code;
    log(`refused: ${err.code}`);
  }

  // 5. A lost reply, then a retry under the same request id: the first attempt
  //    reserved, its reply never arrived (published to an inbox nobody reads),
  //    and the retry gets the original answer instead of reserving again.
  const requestId = randomUUID();
  const body = { request_id: requestId, scopes: [scope], amount: "0.10" };
  nc.publish("spendgate.admit", JSON.stringify(body), { reply: `_INBOX.lost.${requestId}` });
  await nc.flush();
  // Wait (bounded) until the lost attempt has reserved, so the retry below is
  // the second arrival; a real caller would simply retry after its timeout.
  for (let i = 0; ; i++) {
    const b = await sg.request("budget.get", { scope, period: "month" });
    if (b.reserved === "0.1") break;
    if (i === 100) throw new Error("the first attempt never reserved");
    await new Promise((r) => setTimeout(r, 50));
  }
  out.retry = await sg.admit(body);
  log(`retry of ${requestId}: replayed ${out.retry.replayed === true}, reservation ${out.retry.reservation_id}`);
  out.release = await sg.release(out.retry.reservation_id);
  log(`released ${out.retry.reservation_id}`);

  // 6. A caller that gave up on an admit voids its request id: here the admit
  //    reserved but its reply was lost; the void releases it at once, and the
  //    admit arriving again reserves nothing.
  const gaveUp = { request_id: randomUUID(), scopes: [scope], amount: "0.10" };
  nc.publish("spendgate.admit", JSON.stringify(gaveUp), { reply: `_INBOX.lost.${gaveUp.request_id}` });
  await nc.flush();
  for (let i = 0; ; i++) {
    const b = await sg.request("budget.get", { scope, period: "month" });
    if (b.reserved === "0.1") break;
    if (i === 100) throw new Error("the lost admit never reserved");
    await new Promise((r) => setTimeout(r, 50));
  }
  out.void = await sg.void(gaveUp.request_id, gaveUp.scopes);
  log(`voided ${gaveUp.request_id}: reservation ${out.void.reservation_id} ${out.void.reservation_status}`);
  try {
    await sg.admit(gaveUp);
  } catch (err) {
    if (!(err instanceof SpendgateError)) throw err;
    out.afterVoid = err.code;
    log(`the admit again: ${err.code}`);
  }

  // 7. Fail closed: with a timeout the caller treats the call as denied (and
  //    voids the request id; nothing listens here, so the void fails too).
  const unreachable = new Spendgate(nc, { prefix: "nobody.listens.here.", timeoutMs: 200, attempts: 2 });
  try {
    await unreachable.admit({ scopes: [scope], amount: "0.01" });
  } catch (err) {
    if (!(err instanceof UnavailableError)) throw err;
    out.unavailable = err.code;
    log(`no answer: ${err.code}, so the upstream is not called`);
  }

  // 8. A model call, priced from the pricing table: the admit reserves its
  //    most (1200 input tokens, up to 800 output: 0.011), the settle gives
  //    what it used and the ledger prices it at the admit's price version.
  //    The note says how the actual was known (events and export keep it).
  //    The model's name is this run's, so no real model's price changes.
  const model = `node-example-${scope.slice(-8)}`;
  out.price = await sg.request("pricing.put", { model, input: "2.50", output: "10", cached_input: "1.25" });
  out.priced = await sg.admit({ scopes: [scope], model, input_tokens: 1200, max_output_tokens: 800 });
  log(`admitted ${model}: reserved ${out.priced.amount} at price version ${out.priced.pricing.version}`);
  const usage = { input_tokens: 1200, cached_input_tokens: 1000, output_tokens: 640 };
  out.usageSettle = await sg.settle(out.priced.reservation_id, undefined, { usage, note: "provider_usage" });
  log(`${out.usageSettle.status} from usage: actual ${out.usageSettle.actual} of ${out.usageSettle.reserved} reserved`);
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const url = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
  // Reconnect for as long as it takes: nats.js gives up after 10 attempts
  // 2 s apart by default, and a closed connection never comes back, so a
  // service restart longer than about 20 s would leave the app failing
  // closed until it is restarted itself.
  const nc = await connect({ servers: url, maxReconnectAttempts: -1 }).catch((err) => {
    console.error(`cannot reach NATS at ${url} (${err.message}): start spendgate serve, or set NATS_URL to its address`);
    process.exit(1);
  });
  try {
    await walkthrough(nc);
  } finally {
    await nc.close();
  }
}
