// The feed example against a live spendgate with the feed on (.ci/run starts
// `spendgate serve --feed`): a consumer killed mid-stream and started again
// on a new connection sees every event of its scope exactly once, in order,
// and ignores the messages no trusted key signed. SPENDGATE_TRUSTED_KEYS is
// the serve's trusted-keys file (default: the quick start's
// ./spendgate-data/trusted-keys at the repository's root).
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";
import { connect, headers } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { Spendgate } from "./spendgate.mjs";
import { FEED_STREAM, FEED_PREFIX, Cursor, ensureConsumer, follow, nkeyPublicKey, parseTrustedKeys, verifyFeedMessage } from "./feed.mjs";

const url = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const trusted = parseTrustedKeys(
  readFileSync(process.env.SPENDGATE_TRUSTED_KEYS ?? new URL("../../spendgate-data/trusted-keys", import.meta.url), "utf8"),
);

// feedEvents reads the scope's signed events in the feed, in order.
async function feedEvents(nc, filter) {
  const js = jetstream(nc);
  const oc = await js.consumers.get(FEED_STREAM, { filter_subjects: [filter] });
  const evs = [];
  for (;;) {
    const m = await oc.next({ expires: 1000 });
    if (m === null) return evs;
    const ev = verifyFeedMessage(m, trusted);
    if (ev !== null) evs.push(ev);
    if (m.info.pending === 0) return evs;
  }
}

// feedIDs reads the ids of the scope's signed events in the feed, in order.
async function feedIDs(nc, filter) {
  return (await feedEvents(nc, filter)).map((ev) => ev.id);
}

test("feed: trusted keys are nkeys, checked to the checksum", () => {
  assert.ok(trusted.size > 0, "the trusted-keys file lists a key");
  const [key] = trusted.keys();
  assert.equal(nkeyPublicKey(key).asymmetricKeyType, "ed25519");
  const typo = key.slice(0, 10) + (key[10] === "A" ? "B" : "A") + key.slice(11);
  assert.throws(() => nkeyPublicKey(typo), /not a public nkey/);
  assert.throws(() => nkeyPublicKey("SU" + key.slice(2)), /not a public nkey/);
});

async function waitFor(what, cond, ms = 20000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test("feed: a durable consumer killed mid-stream resumes without missing or doubling an event", async () => {
  const id = "feed-" + randomUUID().slice(0, 8);
  const scope = "team:" + id;
  const filter = `${FEED_PREFIX}*.*.*.team.${id}`;
  const admin = await connect({ servers: url });
  const sg = new Spendgate(admin);
  let events = 1; // budget.defined
  const spend = async (n) => {
    for (let i = 0; i < n; i++) {
      const a = await sg.request("admit", { request_id: randomUUID(), scopes: [scope], amount: "1" });
      assert.equal(a.admitted, true);
      await sg.request("settle", { reservation_id: a.reservation_id, actual: "0.5" });
      events += 2;
    }
  };
  try {
    await sg.request("budget.put", { scope, period: "month", limit: "100", unit: "USD" });
    await spend(3);
    await waitFor("the relay", async () => (await feedIDs(admin, filter)).length === events);

    const durable = "billing-" + id;
    await ensureConsumer(admin, durable, { filter, ackWaitMs: 1000 });
    const cursor = new Cursor(); // in a real consumer: loaded from its store
    const processed = [];

    // First life: process three events, acknowledge two, die.
    const nc1 = await connect({ servers: url });
    const js1 = jetstream(nc1);
    const c1 = await js1.consumers.get(FEED_STREAM, durable);
    for (let i = 0; i < 3; i++) {
      const m = await c1.next({ expires: 5000 });
      assert.ok(m, "an event");
      const ev = m.json();
      if (cursor.next(ev)) processed.push(ev.id);
      if (i < 2) await m.ackAck();
    }
    await nc1.close(); // killed before the third ack

    // Someone who may publish to the feed appends two messages that look
    // like events of the scope, far ahead of the real ones: one unsigned,
    // one naming a trusted key with a signature it never made. Believed,
    // either would move the cursor past every event to come.
    const forged = JSON.stringify({ schema: "feed.v1", id: "999999999-0", source_seq: 999999999, index: 0, key: "lane.0",
      committed_at: new Date().toISOString(), type: "reservation.settled.v1", event: { type: "reservation.settled.v1" } });
    const js = jetstream(admin);
    await js.publish(`${FEED_PREFIX}reservation.settled.v1.team.${id}`, forged);
    const h = headers();
    h.set("Spendgate-Sig-Key", [...trusted.keys()][0]);
    h.set("Spendgate-Sig", randomBytes(64).toString("base64url"));
    await js.publish(`${FEED_PREFIX}reservation.settled.v1.team.${id}`, forged, { headers: h });

    await spend(2); // the ledger moves on meanwhile
    let want;
    await waitFor("the relay", async () => (want = await feedIDs(admin, filter)).length === events);

    // Second life: a new connection, the same durable consumer and cursor.
    const nc2 = await connect({ servers: url });
    try {
      const last = want[want.length - 1];
      const { skipped, forged } = await follow(nc2, durable, cursor, (ev) => processed.push(ev.id), {
        trusted,
        until: (c) => `${c.last.seq}-${c.last.index}` === last,
      });
      assert.deepEqual(processed, want, "every event once, in feed order");
      assert.equal(skipped, 1, "the unacknowledged event comes again and is skipped");
      assert.equal(forged, 2, "the messages no trusted key signed are ignored");
    } finally {
      await nc2.close();
    }
  } finally {
    await admin.close();
  }
});

test("feed: node feed.mjs prints every event of the scope, once, as the README says", async () => {
  const id = "feedrun-" + randomUUID().slice(0, 8);
  const scope = "team:" + id;
  const filter = `${FEED_PREFIX}*.*.*.team.${id}`;
  const admin = await connect({ servers: url });
  try {
    const sg = new Spendgate(admin);
    await sg.request("budget.put", { scope, period: "month", limit: "10", unit: "USD" });
    const a = await sg.request("admit", { request_id: randomUUID(), scopes: [scope], amount: "1.25" });
    assert.equal(a.admitted, true);
    await sg.request("settle", { reservation_id: a.reservation_id, actual: "0.75" });
    await waitFor("the relay", async () => (await feedIDs(admin, filter)).length === 3);
  } finally {
    await admin.close();
  }
  const run = () => promisify(execFile)(process.execPath, [fileURLToPath(new URL("./feed.mjs", import.meta.url)), "--until-idle"], {
    env: { ...process.env, NATS_URL: url, FEED_FILTER: filter, FEED_DURABLE: "run-" + id },
    timeout: 60000,
  });
  const { stdout } = await run();
  const lines = stdout.trim().split("\n");
  assert.equal(lines.length, 3, stdout);
  assert.match(lines[0], new RegExp(`budget\\.defined\\.v\\d+  ${scope}  10$`));
  assert.match(lines[1], new RegExp(`reservation\\.opened\\.v1  ${scope}  1\\.25$`));
  assert.match(lines[2], new RegExp(`reservation\\.settled\\.v1  ${scope}  0\\.75$`));
  // Run again on the same durable consumer: nothing new, nothing printed.
  assert.equal((await run()).stdout, "");
});

test("feed: a settle's note, and its usage, are in its reservation.settled.v1 event", async () => {
  const id = "feednote-" + randomUUID().slice(0, 8);
  const scope = "team:" + id;
  const filter = `${FEED_PREFIX}reservation.settled.v1.team.${id}`;
  const nc = await connect({ servers: url });
  try {
    const sg = new Spendgate(nc);
    await sg.putBudget({ scope, period: "month", limit: "10", unit: "USD" });
    const price = await sg.request("pricing.put", { model: id, input: "2.50", output: "10", cached_input: "1.25" });
    const plain = await sg.admit({ scopes: [scope], amount: "1.25" });
    await sg.settle(plain.reservation_id, "0.75", { note: "invoice" });
    const priced = await sg.admit({ scopes: [scope], model: id, input_tokens: 1200, max_output_tokens: 800 });
    await sg.settle(priced.reservation_id, undefined, { usage: { input_tokens: 1200, cached_input_tokens: 1000, output_tokens: 640 }, note: "provider_usage" });
    let evs;
    await waitFor("the relay", async () => (evs = await feedEvents(nc, filter)).length === 2);
    assert.deepEqual(evs.map((ev) => [ev.type, ev.event.reservation_id, ev.event.actual, ev.event.note]), [
      ["reservation.settled.v1", plain.reservation_id, "0.75", "invoice"],
      ["reservation.settled.v1", priced.reservation_id, "0.00815", "provider_usage"],
    ]);
    assert.equal(evs[0].event.usage, undefined);
    assert.deepEqual(evs[1].event.usage, { input_tokens: 1200, cached_input_tokens: 1000, output_tokens: 640, price_version: price.version });
  } finally {
    await nc.close();
  }
});
