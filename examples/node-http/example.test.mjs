// The four rules of spendgate-http.mjs against a stand-in HTTP API on a random
// loopback port (no service needed), and the walk-through against a live
// gateway when SPENDGATE_HTTP and SPENDGATE_KEY are set (.ci/run sets them).
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { SpendgateError, SpendgateHTTP, UnavailableError } from "./spendgate-http.mjs";
import { walkthrough } from "./example.mjs";

// stub answers each endpoint with the replies queued for it, in turn ([status,
// body], or "hang" for no answer), and records what it was sent.
async function stub(replies) {
  const seen = [];
  const server = createServer((req, res) => {
    let data = "";
    req.on("data", (c) => (data += c));
    req.on("end", () => {
      const endpoint = req.url.replace(/^\/spendgate\//, "");
      seen.push({ endpoint, body: JSON.parse(data), auth: req.headers.authorization });
      const next = (replies[endpoint] ?? []).shift();
      if (next === undefined || next === "hang") return; // no answer: the client times out
      const [status, body] = next;
      const text = typeof body === "string" ? body : JSON.stringify(body);
      res.writeHead(status, { "Content-Type": typeof body === "string" ? "text/html" : "application/json" });
      res.end(text);
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const baseUrl = `http://127.0.0.1:${server.address().port}`;
  const stop = () =>
    new Promise((r) => {
      server.close(r);
      server.closeAllConnections(); // requests left hanging
    });
  return { baseUrl, seen, stop };
}

const unavailable = [503, { error: { code: "ledger_unavailable", message: "no reply from the ledger in time" } }];
const busy = [503, { error: { code: "ledger_busy", message: "retry" } }];

test("an admit without a decided answer is retried as a retry, under the same request id, then voided", async () => {
  const s = await stub({ admit: [unavailable, "hang", busy], void: [[200, { request_id: "r-1", status: "voided" }]] });
  try {
    const sg = new SpendgateHTTP({ baseUrl: s.baseUrl, key: "sgk_test", timeoutMs: 300, attempts: 3 });
    await assert.rejects(sg.admit({ request_id: "r-1", scopes: ["org:x"], amount: "0.01" }), (err) => {
      assert.ok(err instanceof UnavailableError, "fail closed");
      assert.equal(err.code, "ledger_busy");
      assert.equal(err.voided.status, "voided");
      return true;
    });
    assert.deepEqual(
      s.seen.map((x) => [x.endpoint, x.body.request_id, x.body.retry ?? false]),
      [["admit", "r-1", false], ["admit", "r-1", true], ["admit", "r-1", true], ["void", "r-1", false]],
    );
    assert.deepEqual(s.seen[3].body, { request_id: "r-1", scopes: ["org:x"] });
    assert.equal(s.seen[0].auth, "Bearer sgk_test");
  } finally {
    await s.stop();
  }
});

test("internal is voided at once, and a load balancer's 502 is retried", async () => {
  const s = await stub({
    admit: [[502, "<html>Bad Gateway</html>"], [500, { error: { code: "internal", message: "boom" } }]],
    void: [[200, { request_id: "r-2", status: "voided" }]],
  });
  try {
    const sg = new SpendgateHTTP({ baseUrl: s.baseUrl, key: "sgk_test", timeoutMs: 1000 });
    await assert.rejects(sg.admit({ request_id: "r-2", scopes: ["org:x"], amount: "0.01" }), (err) => err instanceof UnavailableError && err.code === "internal");
    assert.deepEqual(s.seen.map((x) => x.endpoint), ["admit", "admit", "void"]);
  } finally {
    await s.stop();
  }
});

test("a denial is an answer and a refusal is a SpendgateError: neither is retried", async () => {
  const denied = { admitted: false, denial: { reason: "limit_reached", scope: "org:x" } };
  const s = await stub({ admit: [[200, denied], [400, { error: { code: "invalid_amount", message: "amount: -1" } }]] });
  try {
    const sg = new SpendgateHTTP({ baseUrl: s.baseUrl, key: "sgk_test" });
    assert.deepEqual(await sg.admit({ scopes: ["org:x"], amount: "1" }), denied);
    await assert.rejects(sg.admit({ scopes: ["org:x"], amount: "-1" }), (err) => err instanceof SpendgateError && err.code === "invalid_amount" && err.status === 400);
    assert.equal(s.seen.length, 2);
    assert.ok(s.seen[0].body.request_id, "a request id is made when the caller gives none");
  } finally {
    await s.stop();
  }
});

test("a settle whose outcome is unknown is kept and sent again, same body, until it lands", async () => {
  const settled = { reservation_id: "rsv_1", status: "settled", actual: "0.5" };
  const s = await stub({ settle: [unavailable, "hang", unavailable, busy, [200, settled]] });
  try {
    const sg = new SpendgateHTTP({ baseUrl: s.baseUrl, key: "sgk_test", timeoutMs: 300, attempts: 2, closeBackoffMs: 10 });
    let retrying;
    await assert.rejects(sg.settle("rsv_1", "0.50"), (err) => {
      assert.ok(err instanceof UnavailableError);
      retrying = err.retrying;
      return true;
    });
    assert.equal(sg.owed, 1);
    assert.deepEqual(await retrying, settled);
    await sg.drain();
    assert.equal(sg.owed, 0);
    assert.equal(s.seen.length, 5);
    for (const x of s.seen) assert.deepEqual(x.body, { reservation_id: "rsv_1", actual: "0.50" });
  } finally {
    await s.stop();
  }
});

test("a settle being sent again stops at a refusal, and at close()", async () => {
  const s = await stub({ settle: [unavailable, [409, { error: { code: "already_released", message: "released", status: "released" } }]], release: [unavailable] });
  try {
    const sg = new SpendgateHTTP({ baseUrl: s.baseUrl, key: "sgk_test", attempts: 1, closeBackoffMs: 10 });
    const settle = await sg.settle("rsv_1", "0.50").catch((err) => err);
    await assert.rejects(settle.retrying, (err) => err instanceof SpendgateError && err.code === "already_released");

    const slow = new SpendgateHTTP({ baseUrl: s.baseUrl, key: "sgk_test", attempts: 1, closeBackoffMs: 60_000 });
    const release = await slow.release("rsv_2").catch((err) => err);
    slow.close();
    await assert.rejects(release.retrying, (err) => err instanceof UnavailableError && /closed/.test(err.message));
    assert.equal(slow.owed, 0);
  } finally {
    await s.stop();
  }
});

test("a settle from usage, with a note, sends the counts without an actual, the same body every time", async () => {
  const settled = { reservation_id: "rsv_5", status: "settled", reserved: "0.011", actual: "0.00815" };
  const s = await stub({ settle: [unavailable, busy, unavailable, [200, settled], [200, { reservation_id: "rsv_6", status: "settled", actual: "0.07" }]] });
  try {
    const sg = new SpendgateHTTP({ baseUrl: s.baseUrl, key: "sgk_test", attempts: 2, closeBackoffMs: 10 });
    // A usage object with more than the counts (a reply's, say): only the counts go.
    const usage = { input_tokens: 1200, cached_input_tokens: 1000, output_tokens: 640, price_version: 7 };
    const err = await sg.settle("rsv_5", undefined, { usage, note: "provider_usage" }).catch((e) => e);
    assert.ok(err instanceof UnavailableError, `want an UnavailableError, got ${err}`);
    assert.deepEqual(await err.retrying, settled);
    await sg.settle("rsv_6", "0.07", { note: "invoice" });
    const want = { reservation_id: "rsv_5", input_tokens: 1200, output_tokens: 640, cached_input_tokens: 1000, note: "provider_usage" };
    assert.deepEqual(s.seen.map((x) => x.body), [want, want, want, want, { reservation_id: "rsv_6", actual: "0.07", note: "invoice" }]);
  } finally {
    await s.stop();
  }
});

// declarations maps each top-level "export interface" and "export type" of
// a .d.mts to its text (up to the next blank line or export).
function declarations(text) {
  const out = new Map();
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const m = /^export (?:interface|type) (\w+)/.exec(lines[i]);
    if (!m) continue;
    let j = i + 1;
    while (j < lines.length && lines[j] !== "" && !lines[j].startsWith("export ")) j++;
    out.set(m[1], lines.slice(i, j).join("\n"));
  }
  return out;
}

const typesFile = (path) => readFileSync(new URL(path, import.meta.url), "utf8");
const nodeTypes = new URL("../node/spendgate.d.mts", import.meta.url);

test("spendgate-http.d.mts: the wire's shapes are examples/node's, word for word", { skip: !existsSync(nodeTypes) && "no ../node" }, () => {
  const mine = declarations(typesFile("./spendgate-http.d.mts"));
  const theirs = declarations(readFileSync(nodeTypes, "utf8"));
  for (const [name, decl] of mine) if (theirs.has(name)) assert.equal(decl, theirs.get(name), `${name} differs from examples/node's`);
  // Every shape there is here too, but its client's options; those only
  // here are the HTTP client's own.
  assert.deepEqual([...theirs.keys()].filter((name) => !mine.has(name)), ["SpendgateOptions"]);
  assert.deepEqual([...mine.keys()].filter((name) => !theirs.has(name)), ["HTTPStatusError", "SpendgateHTTPOptions", "BudgetRetireReply"]);
});

test("spendgate-http.d.mts declares what spendgate-http.mjs has", () => {
  const text = typesFile("./spendgate-http.d.mts");
  const cls = text.slice(text.indexOf("export class SpendgateHTTP {"));
  const members = new Set([...cls.matchAll(/^  (?:readonly )?(\w+)[<(:?]/gm)].map((m) => m[1]));
  const sg = new SpendgateHTTP({ baseUrl: "http://127.0.0.1:1", key: "sgk_test" });
  for (const name of members) {
    if (name === "constructor") continue;
    assert.ok(name in sg, `${name} is declared but the client has none`);
  }
  const methods = Object.getOwnPropertyNames(SpendgateHTTP.prototype).filter((n) => n !== "constructor");
  assert.deepEqual(methods.filter((n) => !members.has(n)), [], "every method of the client is declared");
  assert.deepEqual(Object.keys(sg).filter((n) => !members.has(n)), [], "every field of the client is declared");
});

const live = process.env.SPENDGATE_HTTP && process.env.SPENDGATE_KEY;
test("walkthrough against a live gateway", { skip: !live && "SPENDGATE_HTTP and SPENDGATE_KEY are not set" }, async () => {
  const sg = new SpendgateHTTP({ baseUrl: process.env.SPENDGATE_HTTP, key: process.env.SPENDGATE_KEY });
  const out = await walkthrough(sg, () => {});
  assert.equal(out.budget.limit, "1");
  assert.equal(out.admit.admitted, true);
  assert.match(out.admit.reservation_id, /^rsv_/);
  assert.equal(out.replay.replayed, true, "the retry returns the first answer, not a second reservation");
  assert.equal(out.replay.reservation_id, out.admit.reservation_id);
  assert.equal(out.denied.admitted, false);
  assert.equal(out.denied.denial.reason, "limit_reached");
  assert.match(out.denied.denial.resets_at, /^\d{4}-\d{2}-01T00:00:00Z$/);
  assert.equal(out.settle.status, "settled");
  assert.equal(out.settle.actual, "0.5");
  assert.deepEqual([out.settleAgain.status, out.settleAgain.code], [409, "already_settled"]);
  assert.deepEqual([out.invalid.status, out.invalid.code], [400, "invalid_amount"]);
  assert.deepEqual([out.unknown.status, out.unknown.code], [404, "unknown_reservation"]);
  assert.equal(out.void.status, "voided");
  // The most the model call can cost, 1200 x 2.50 + 800 x 10 per million
  // tokens, then what it used: 200 input tokens at 2.50, 1000 cached at
  // 1.25 and 640 output at 10 per million.
  assert.equal(out.priced.admitted, true);
  assert.equal(out.priced.amount, "0.011");
  assert.equal(out.priced.pricing.version, out.price.version);
  assert.deepEqual([out.usageSettle.status, out.usageSettle.reserved, out.usageSettle.actual], ["settled", "0.011", "0.00815"]);
  assert.deepEqual(out.usageSettle.usage, { input_tokens: 1200, cached_input_tokens: 1000, output_tokens: 640, price_version: out.price.version });
  assert.deepEqual([out.usageAgain.replayed, out.usageAgain.actual], [true, "0.00815"]);
  assert.deepEqual([out.after.spent, out.after.reserved, out.after.available], ["0.50815", "0", "0.49185"]);
  assert.equal(out.retired.retired, true);
  assert.equal(out.retired.retired_reason, "walkthrough over");
  assert.ok(out.retired.retired_at, "retired_at is set");
  assert.deepEqual([out.afterRetire.admitted, out.afterRetire.denial.reason], [false, "budget_retired"]);
  assert.equal(sg.owed, 0);
});

test("settle options against a live gateway: an actual with a note, refusals", { skip: !live && "SPENDGATE_HTTP and SPENDGATE_KEY are not set" }, async () => {
  const sg = new SpendgateHTTP({ baseUrl: process.env.SPENDGATE_HTTP, key: process.env.SPENDGATE_KEY });
  const id = randomUUID().slice(0, 8);
  const scope = `org:node-http-settle-${id}`;
  const model = `node-http-settle-${id}`;
  await sg.putBudget({ scope, period: "month", limit: "1", unit: "USD" });
  const price = await sg.request("pricing.put", { model, input: "3", output: "15" });
  try {
    // An actual with a note: the note is refused unless it is one word.
    const plain = await sg.admit({ scopes: [scope], amount: "0.10" });
    for (const note of ["two words", "x".repeat(33)]) {
      await assert.rejects(sg.settle(plain.reservation_id, "0.07", { note }), (err) => {
        assert.ok(err instanceof SpendgateError, `a refusal, got ${err}`);
        assert.deepEqual([err.status, err.code], [400, "invalid_request"]);
        return true;
      });
    }
    assert.equal(sg.owed, 0, "a refusal is not sent again");
    const noted = await sg.settle(plain.reservation_id, "0.07", { note: "invoice" });
    assert.deepEqual([noted.status, noted.actual, noted.usage], ["settled", "0.07", undefined]);
    // Usage of a reservation not priced from a model is refused.
    const unpriced = await sg.admit({ scopes: [scope], amount: "0.10" });
    await assert.rejects(sg.settle(unpriced.reservation_id, undefined, { usage: { input_tokens: 10, output_tokens: 10 } }),
      (err) => err instanceof SpendgateError && err.status === 400 && err.code === "not_priced");
    await sg.release(unpriced.reservation_id);

    // No cached price: cached input costs the input price. 5000 x 3 + 2000
    // x 15 per million = 0.045; reserved 5000 x 3 + 4000 x 15 = 0.075.
    const a = await sg.admit({ scopes: [scope], model, input_tokens: 5000, max_output_tokens: 4000 });
    assert.equal(a.amount, "0.075");
    const usage = { input_tokens: 5000, cached_input_tokens: 4000, output_tokens: 2000 };
    const settled = await sg.settle(a.reservation_id, undefined, { usage });
    assert.deepEqual([settled.actual, settled.usage], ["0.045", { ...usage, price_version: price.version }]);
    // Other usage is another actual: refused, nothing changes.
    await assert.rejects(sg.settle(a.reservation_id, undefined, { usage: { ...usage, output_tokens: 2001 } }),
      (err) => err instanceof SpendgateError && err.status === 409 && err.code === "already_settled");

    const b = await sg.getBudget(scope, "month");
    assert.deepEqual([b.spent, b.reserved, b.open], ["0.115", "0", 0], "0.07 with a note and 0.045 from usage");
  } finally {
    await sg.retireBudget(scope, "month", "test over");
  }
});
