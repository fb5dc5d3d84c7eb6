// Runs the walk-through against a live spendgate (NATS_URL) and checks every
// step's answer. .ci/run starts `spendgate serve` and runs `npm test` here.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { walkthrough } from "./example.mjs";
import { randomUUID } from "node:crypto";
import { Spendgate, SpendgateError, UnavailableError } from "./spendgate.mjs";

test("walkthrough: budget, admit, settle, denial, error, lost reply, void, fail closed, settle from usage", async () => {
  const nc = await connect({ servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222" });
  try {
    const out = await walkthrough(nc, () => {});
    assert.equal(out.budget.limit, "1");
    assert.equal(out.admit.admitted, true);
    assert.match(out.admit.reservation_id, /^rsv_/);
    assert.equal(out.denied.admitted, false);
    assert.equal(out.denied.denial.reason, "limit_reached");
    // A month budget's denial says when the month ends (UTC), when waiting lifts it.
    assert.match(out.denied.denial.resets_at, /^\d{4}-\d{2}-01T00:00:00Z$/);
    assert.equal(out.errorCode, "invalid_amount");
    assert.equal(out.settle.status, "settled");
    assert.equal(out.settle.actual, "0.35");
    assert.equal(out.retry.admitted, true);
    assert.equal(out.retry.replayed, true, "the retry must return the lost first answer, not reserve again");
    assert.equal(out.void.status, "voided");
    assert.equal(out.void.reservation_status, "released", "the void released the lost admit's reservation at once");
    assert.equal(out.afterVoid, "request_voided", "the admit after the void reserves nothing");
    assert.equal(out.unavailable, "ledger_unavailable");
    // Step 8: the most the call can cost, 1200 x 2.50 + 800 x 10 per
    // million tokens, then what it used: 200 input tokens at 2.50, 1000
    // cached at 1.25 and 640 output at 10 per million.
    assert.equal(out.priced.admitted, true);
    assert.equal(out.priced.amount, "0.011");
    assert.equal(out.priced.pricing.version, out.price.version);
    assert.equal(out.usageSettle.status, "settled");
    assert.equal(out.usageSettle.reserved, "0.011");
    assert.equal(out.usageSettle.actual, "0.00815");
    assert.deepEqual(out.usageSettle.usage, { input_tokens: 1200, cached_input_tokens: 1000, output_tokens: 640, price_version: out.price.version });
    const b = await new Spendgate(nc).request("budget.get", { scope: out.budget.scope, period: "month" });
    assert.deepEqual([b.spent, b.reserved, b.open], ["0.35815", "0", 0], "0.35 settled in step 2, 0.00815 from usage");
  } finally {
    await nc.close();
  }
});

// A stand-in replica on a prefix of its own, over the same NATS server: it
// answers each request with the replies the test gives for its endpoint,
// in turn, and records what it was sent.
function stub(nc, replies) {
  const prefix = `stub.${Math.random().toString(36).slice(2)}.`;
  const seen = [];
  const sub = nc.subscribe(`${prefix}>`, {
    callback: (err, msg) => {
      if (err) return;
      const endpoint = msg.subject.slice(prefix.length);
      seen.push({ endpoint, body: msg.json() });
      const next = (replies[endpoint] ?? []).shift();
      if (next) msg.respond(JSON.stringify(next));
    },
  });
  return { prefix, seen, stop: () => sub.unsubscribe() };
}

test("an admit answered ledger_unavailable or ledger_busy is retried as a retry, then voided", async () => {
  const nc = await connect({ servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222" });
  const unavailable = { error: { code: "ledger_unavailable", message: "the outcome is unknown" } };
  const busy = { error: { code: "ledger_busy", message: "retry" } };
  const s = stub(nc, { admit: [unavailable, busy, unavailable], void: [{ request_id: "r-1", status: "voided" }] });
  try {
    await nc.flush();
    const sg = new Spendgate(nc, { prefix: s.prefix, timeoutMs: 500, attempts: 3 });
    await assert.rejects(sg.admit({ request_id: "r-1", scopes: ["org:x"], amount: "0.01" }), (err) => {
      assert.ok(err instanceof UnavailableError, `want an UnavailableError (fail closed), got ${err}`);
      assert.equal(err.code, "ledger_unavailable");
      assert.equal(err.voided?.status, "voided", "an admit whose outcome stayed unknown is voided");
      return true;
    });
    assert.deepEqual(s.seen.map((m) => [m.endpoint, m.body.request_id, m.body.retry === true]),
      [["admit", "r-1", false], ["admit", "r-1", true], ["admit", "r-1", true], ["void", "r-1", false]]);
  } finally {
    s.stop();
    await nc.close();
  }
});

test("a settle answered ledger_busy is retried with the same body until it lands", async () => {
  const nc = await connect({ servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222" });
  const settled = { reservation_id: "rsv_1", status: "settled", reserved: "0.05", actual: "0.04" };
  const s = stub(nc, { settle: [{ error: { code: "ledger_busy", message: "retry" } }, settled] });
  try {
    await nc.flush();
    const sg = new Spendgate(nc, { prefix: s.prefix, timeoutMs: 500, attempts: 3 });
    assert.deepEqual(await sg.settle("rsv_1", "0.04"), settled);
    assert.equal(s.seen.length, 2);
  } finally {
    s.stop();
    await nc.close();
  }
});

test("an internal error reply fails closed and voids the admit, without a retry", async () => {
  const nc = await connect({ servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222" });
  const s = stub(nc, { admit: [{ error: { code: "internal", message: "boom" } }], void: [{ request_id: "r-2", status: "voided" }] });
  try {
    await nc.flush();
    const sg = new Spendgate(nc, { prefix: s.prefix, timeoutMs: 500, attempts: 3 });
    await assert.rejects(sg.admit({ request_id: "r-2", scopes: ["org:x"], amount: "0.01" }), (err) => {
      assert.ok(err instanceof UnavailableError, `want an UnavailableError (fail closed), got ${err}`);
      assert.equal(err.code, "internal");
      assert.equal(err.voided?.status, "voided");
      return true;
    });
    assert.deepEqual(s.seen.map((m) => m.endpoint), ["admit", "void"]);
  } finally {
    s.stop();
    await nc.close();
  }
});

test("a settle whose outcome stays unknown is sent again, same body, until it lands", async () => {
  const nc = await connect({ servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222" });
  const unavailable = { error: { code: "ledger_unavailable", message: "the outcome is unknown" } };
  const settled = { reservation_id: "rsv_2", status: "settled", reserved: "0.05", actual: "0.04" };
  // Two attempts fail (the error is thrown), the background's first again
  // too, its second lands.
  const s = stub(nc, { settle: [unavailable, unavailable, unavailable, settled] });
  try {
    await nc.flush();
    const sg = new Spendgate(nc, { prefix: s.prefix, timeoutMs: 500, attempts: 2, closeBackoffMs: 10 });
    let retrying;
    await assert.rejects(sg.settle("rsv_2", "0.04"), (err) => {
      assert.ok(err instanceof UnavailableError, `want an UnavailableError, got ${err}`);
      retrying = err.retrying;
      return true;
    });
    assert.ok(retrying, "the settle is kept");
    assert.equal(sg.owed, 1);
    assert.deepEqual(await retrying, settled);
    await sg.drain();
    assert.equal(sg.owed, 0);
    assert.deepEqual(s.seen.map((m) => [m.endpoint, m.body.reservation_id, m.body.actual]),
      Array(4).fill(["settle", "rsv_2", "0.04"]), "the same settle every time");
  } finally {
    s.stop();
    await nc.close();
  }
});

test("a settle sent again stops when the ledger refuses it", async () => {
  const nc = await connect({ servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222" });
  const unavailable = { error: { code: "ledger_unavailable", message: "the outcome is unknown" } };
  const refused = { error: { code: "unknown_reservation", message: "no such reservation" } };
  const s = stub(nc, { settle: [unavailable, refused] });
  try {
    await nc.flush();
    const sg = new Spendgate(nc, { prefix: s.prefix, timeoutMs: 500, attempts: 1, closeBackoffMs: 10 });
    const err = await sg.settle("rsv_3", "0.01").catch((e) => e);
    assert.ok(err instanceof UnavailableError);
    await assert.rejects(err.retrying, (e) => e.code === "unknown_reservation");
    await sg.drain();
    assert.equal(sg.owed, 0);
    assert.equal(s.seen.length, 2);
  } finally {
    s.stop();
    await nc.close();
  }
});

test("settle options against the live service: an actual with a note, usage sent again, refusals", async () => {
  const nc = await connect({ servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222" });
  try {
    const sg = new Spendgate(nc);
    const id = randomUUID().slice(0, 8);
    const scope = `org:node-settle-${id}`;
    const model = `node-settle-${id}`;
    await sg.putBudget({ scope, period: "month", limit: "1", unit: "USD" });
    const price = await sg.request("pricing.put", { model, input: "3", output: "15" });

    // An actual with a note: the note is refused unless it is one word.
    const plain = await sg.admit({ scopes: [scope], amount: "0.10" });
    await assert.rejects(sg.settle(plain.reservation_id, "0.07", { note: "two words" }), (err) => {
      assert.ok(err instanceof SpendgateError, `a refusal, got ${err}`);
      assert.equal(err.code, "invalid_request");
      return true;
    });
    await assert.rejects(sg.settle(plain.reservation_id, "0.07", { note: "x".repeat(33) }), (err) => err.code === "invalid_request");
    assert.equal(sg.owed, 0, "a refusal is not sent again");
    const noted = await sg.settle(plain.reservation_id, "0.07", { note: "invoice" });
    assert.deepEqual([noted.status, noted.actual, noted.usage], ["settled", "0.07", undefined]);
    // Usage of a reservation not priced from a model is refused.
    const unpriced = await sg.admit({ scopes: [scope], amount: "0.10" });
    await assert.rejects(sg.settle(unpriced.reservation_id, undefined, { usage: { input_tokens: 10, output_tokens: 10 } }), (err) => err.code === "not_priced");
    await sg.release(unpriced.reservation_id);

    // No cached price: cached input costs the input price. 5000 x 3 + 2000
    // x 15 per million = 0.045; reserved 5000 x 3 + 4000 x 15 = 0.075.
    const a = await sg.admit({ scopes: [scope], model, input_tokens: 5000, max_output_tokens: 4000 });
    assert.equal(a.amount, "0.075");
    const usage = { input_tokens: 5000, cached_input_tokens: 4000, output_tokens: 2000 };
    const first = await sg.settle(a.reservation_id, undefined, { usage, note: "provider_usage" });
    assert.deepEqual([first.actual, first.usage], ["0.045", { ...usage, price_version: price.version }]);
    // The same settle again (what rule 4 sends when the reply was lost) is
    // answered replayed with the actual the first one recorded.
    const again = await sg.settle(a.reservation_id, undefined, { usage, note: "provider_usage" });
    assert.deepEqual([again.status, again.actual, again.replayed], ["settled", "0.045", true]);
    // Other usage is another actual: refused, nothing changes.
    await assert.rejects(sg.settle(a.reservation_id, undefined, { usage: { ...usage, output_tokens: 2001 } }), (err) => err.code === "already_settled");

    const b = await sg.request("budget.get", { scope, period: "month" });
    assert.deepEqual([b.spent, b.reserved, b.open], ["0.115", "0", 0], "0.07 with a note and 0.045 from usage");
  } finally {
    await nc.close();
  }
});

test("a settle from usage, with a note, sends the counts without an actual, the same body every time", async () => {
  const nc = await connect({ servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222" });
  const unavailable = { error: { code: "ledger_unavailable", message: "the outcome is unknown" } };
  const settled = { reservation_id: "rsv_5", status: "settled", reserved: "0.011", actual: "0.00815" };
  const s = stub(nc, { settle: [unavailable, unavailable, settled, { reservation_id: "rsv_6", status: "settled", reserved: "0.1", actual: "0.07" }] });
  try {
    await nc.flush();
    const sg = new Spendgate(nc, { prefix: s.prefix, timeoutMs: 500, attempts: 1, closeBackoffMs: 10 });
    // A usage object with more than the counts (a reply's, say): only the counts go.
    const usage = { input_tokens: 1200, cached_input_tokens: 1000, output_tokens: 640, price_version: 7 };
    const err = await sg.settle("rsv_5", undefined, { usage, note: "provider_usage" }).catch((e) => e);
    assert.ok(err instanceof UnavailableError, `want an UnavailableError, got ${err}`);
    assert.deepEqual(await err.retrying, settled);
    await sg.settle("rsv_6", "0.07", { note: "invoice" });
    const want = { reservation_id: "rsv_5", input_tokens: 1200, output_tokens: 640, cached_input_tokens: 1000, note: "provider_usage" };
    assert.deepEqual(s.seen.map((m) => m.body), [want, want, want, { reservation_id: "rsv_6", actual: "0.07", note: "invoice" }]);
    assert.deepEqual(s.seen.map((m) => m.endpoint), ["settle", "settle", "settle", "settle"]);
  } finally {
    s.stop();
    await nc.close();
  }
});

test("an admit given request_id undefined makes one", async () => {
  const nc = await connect({ servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222" });
  const s = stub(nc, { admit: [{ admitted: true, reservation_id: "rsv_4" }] });
  try {
    await nc.flush();
    const sg = new Spendgate(nc, { prefix: s.prefix, timeoutMs: 500 });
    await sg.admit({ request_id: undefined, scopes: ["org:x"], amount: "0.01" });
    assert.match(s.seen[0].body.request_id, /^[0-9a-f-]{36}$/);
  } finally {
    s.stop();
    await nc.close();
  }
});
