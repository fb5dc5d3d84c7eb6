// The feed example against a live spendgate with the feed on (.ci/run starts
// `spendgate serve --feed`): a consumer killed mid-stream and started again
// on a new connection sees every event of its scope exactly once, in order.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { Spendgate } from "./spendgate.mjs";
import { FEED_STREAM, FEED_PREFIX, Cursor, ensureConsumer, follow } from "./feed.mjs";

const url = process.env.NATS_URL ?? "nats://127.0.0.1:4222";

// feedIDs reads the ids of the scope's events in the feed, in order.
async function feedIDs(nc, filter) {
  const js = jetstream(nc);
  const oc = await js.consumers.get(FEED_STREAM, { filter_subjects: [filter] });
  const ids = [];
  for (;;) {
    const m = await oc.next({ expires: 1000 });
    if (m === null) return ids;
    ids.push(m.json().id);
    if (m.info.pending === 0) return ids;
  }
}

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

    await spend(2); // the ledger moves on meanwhile
    let want;
    await waitFor("the relay", async () => (want = await feedIDs(admin, filter)).length === events);

    // Second life: a new connection, the same durable consumer and cursor.
    const nc2 = await connect({ servers: url });
    try {
      const last = want[want.length - 1];
      const { skipped } = await follow(nc2, durable, cursor, (ev) => processed.push(ev.id), {
        until: (c) => `${c.last.seq}-${c.last.index}` === last,
      });
      assert.deepEqual(processed, want, "every event once, in feed order");
      assert.equal(skipped, 1, "the unacknowledged event comes again and is skipped");
    } finally {
      await nc2.close();
    }
  } finally {
    await admin.close();
  }
});
