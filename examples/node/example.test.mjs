// Runs the walk-through against a live spendgate (NATS_URL) and checks every
// step's answer. .ci/run starts `spendgate serve` and runs `npm test` here.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { walkthrough } from "./example.mjs";
import { Spendgate, UnavailableError } from "./spendgate.mjs";

test("walkthrough: budget, admit, settle, denial, error, lost reply, void, fail closed", async () => {
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
