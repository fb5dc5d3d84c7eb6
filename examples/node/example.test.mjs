// Runs the walk-through against a live spendgate (NATS_URL) and checks every
// step's answer. .ci/run starts `spendgate serve` and runs `npm test` here.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { walkthrough } from "./example.mjs";

test("walkthrough: budget, admit, settle, denial, error, lost reply, void, fail closed", async () => {
  const nc = await connect({ servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222" });
  try {
    const out = await walkthrough(nc, () => {});
    assert.equal(out.budget.limit, "1");
    assert.equal(out.admit.admitted, true);
    assert.match(out.admit.reservation_id, /^rsv_/);
    assert.equal(out.denied.admitted, false);
    assert.equal(out.denied.denial.reason, "limit_reached");
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
