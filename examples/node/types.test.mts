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
  const later: DenialReason = "a_reason_added_later";
  console.log(later);
  await sg.drain();
  const n: number = sg.owed;
  console.log(n);
  // @ts-expect-error an amount is a decimal string, never a number
  await sg.admit({ scopes: ["org:acme"], amount: 0.05 });
  // @ts-expect-error the actual is a decimal string too
  await sg.settle("rsv_1", 0.04);
  // @ts-expect-error scopes is required
  await sg.admit({ amount: "0.05" });
  // @ts-expect-error there is no period "year"
  await sg.putBudget({ scope: "org:acme", period: "year", limit: "1" });
}
