// Type-checked by `npm test` (tsc, strict), never run: what a TypeScript
// app importing spendgate.mjs writes, against spendgate.d.mts. Each line
// marked to expect an error must fail to compile, or tsc fails the test.
import { connect } from "@nats-io/transport-node";
import { Spendgate, SpendgateError, UnavailableError, type AdmitReply, type CloseReply, type DenialReason } from "./spendgate.mjs";

export async function typed(): Promise<void> {
  const nc = await connect({ servers: "nats://127.0.0.1:4222", maxReconnectAttempts: -1 });
  const sg = new Spendgate(nc, { timeoutMs: 1000, closeBackoffMs: 500 });
  await sg.putBudget({ scope: "org:acme", period: "month", limit: "100", unit: "USD" });
  const r: AdmitReply = await sg.admit({ scopes: ["org:acme"], amount: "0.05", ttl: "30s", metadata: { model: "gpt-4o" } });
  if (!r.admitted) {
    const when: string | undefined = r.denial?.resets_at;
    console.log(r.denial?.reason, when);
    if (r.denial?.reason === "budget_retired") console.log("define a budget of another scope");
    return;
  }
  try {
    const c: CloseReply = await sg.settle(r.reservation_id!, "0.04");
    console.log(c.actual, c.overrun, c.late);
  } catch (err) {
    if (err instanceof UnavailableError) await err.retrying?.catch(() => undefined);
    else if (err instanceof SpendgateError) console.log(err.code);
  }
  const priced = await sg.admit({ scopes: ["org:acme"], model: "gpt-x", input_tokens: 1200, max_output_tokens: 800 });
  const byUsage: CloseReply = await sg.settle(priced.reservation_id!, undefined, {
    usage: { input_tokens: 1200, output_tokens: 640, cached_input_tokens: 1000 },
    note: "provider_usage",
  });
  const version: number | undefined = byUsage.usage?.price_version;
  console.log(version);
  await sg.settle("rsv_2", "0.04", { note: "invoice" });
  await sg.settle("rsv_3", undefined, { usage: { input_tokens: 10, output_tokens: 0 } });
  const later: DenialReason = "a_reason_added_later";
  console.log(later);
  await sg.drain();
  const n: number = sg.owed;
  console.log(n);
  // @ts-expect-error an amount is a decimal string, never a number
  await sg.admit({ scopes: ["org:acme"], amount: 0.05 });
  // @ts-expect-error the actual is a decimal string too
  await sg.settle("rsv_1", 0.04);
  // @ts-expect-error an actual or a usage, not both
  await sg.settle("rsv_1", "0.04", { usage: { input_tokens: 10, output_tokens: 5 } });
  // @ts-expect-error without an actual, the usage is required
  await sg.settle("rsv_1", undefined, { note: "estimate" });
  // @ts-expect-error without an actual, the usage is required
  await sg.settle("rsv_1", undefined);
  // @ts-expect-error a usage's counts are numbers
  await sg.settle("rsv_1", undefined, { usage: { input_tokens: "10", output_tokens: 5 } });
  // @ts-expect-error the usage's fields are the wire's names
  await sg.settle("rsv_1", undefined, { usage: { inputTokens: 10, outputTokens: 5 } });
  // @ts-expect-error scopes is required
  await sg.admit({ amount: "0.05" });
  // @ts-expect-error there is no period "year"
  await sg.putBudget({ scope: "org:acme", period: "year", limit: "1" });
}
