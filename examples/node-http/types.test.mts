// Type-checked by `npm test` (tsc, strict), never run: what a TypeScript
// app importing spendgate-http.mjs writes, against spendgate-http.d.mts.
// Each line marked to expect an error must fail to compile, or tsc fails
// the test.
import {
  SpendgateError,
  SpendgateHTTP,
  UnavailableError,
  type AdmitReply,
  type BudgetView,
  type CloseReply,
  type DenialReason,
  type HTTPStatusError,
} from "./spendgate-http.mjs";

export async function typed(): Promise<void> {
  const sg = new SpendgateHTTP({ baseUrl: "http://127.0.0.1:8080", key: "sgk_...", timeoutMs: 1000, closeBackoffMs: 500 });
  await sg.putBudget({ scope: "org:acme", period: "month", limit: "100", unit: "USD" });
  await sg.request("pricing.put", { model: "gpt-x", input: "2.50", output: "10" });
  const r: AdmitReply = await sg.admit({ scopes: ["org:acme"], model: "gpt-x", input_tokens: 1200, max_output_tokens: 800 });
  if (!r.admitted) {
    const when: string | undefined = r.denial?.resets_at;
    console.log(r.denial?.reason, when);
    if (r.denial?.reason === "budget_retired") console.log("define a budget of another scope");
    return;
  }
  try {
    const c: CloseReply = await sg.settle(r.reservation_id!, undefined, {
      usage: { input_tokens: 1200, output_tokens: 640, cached_input_tokens: 1000 },
      note: "provider_usage",
    });
    const version: number | undefined = c.usage?.price_version;
    console.log(c.actual, c.overrun, c.late, version);
  } catch (err) {
    if (err instanceof UnavailableError) await err.retrying?.catch(() => undefined);
    else if (err instanceof SpendgateError) console.log(err.status, err.code);
    else if ((err as HTTPStatusError).status !== undefined) console.log((err as HTTPStatusError).unknown);
  }
  await sg.settle("rsv_2", "0.04", { note: "invoice" });
  await sg.settle("rsv_3", "0.04");
  const b: BudgetView = await sg.getBudget("org:acme", "month");
  const all: BudgetView[] = (await sg.getBudget("org:acme")).budgets;
  const retired = await sg.retireBudget("org:acme", "month", "run over");
  console.log(b.available, all.length, retired.retired, retired.already);
  const later: DenialReason = "a_reason_added_later";
  console.log(later);
  await sg.drain();
  const n: number = sg.owed;
  console.log(n);
  sg.close();
  // @ts-expect-error baseUrl and key are required
  new SpendgateHTTP({ baseUrl: "http://127.0.0.1:8080" });
  // @ts-expect-error an amount is a decimal string, never a number
  await sg.admit({ scopes: ["org:acme"], amount: 0.05 });
  // @ts-expect-error the actual is a decimal string too
  await sg.settle("rsv_1", 0.04);
  // @ts-expect-error an actual or a usage, not both
  await sg.settle("rsv_1", "0.04", { usage: { input_tokens: 10, output_tokens: 5 } });
  // @ts-expect-error without an actual, the usage is required
  await sg.settle("rsv_1", undefined, { note: "estimate" });
  // @ts-expect-error a usage's counts are numbers
  await sg.settle("rsv_1", undefined, { usage: { input_tokens: "10", output_tokens: 5 } });
  // @ts-expect-error the usage's fields are the wire's names
  await sg.settle("rsv_1", undefined, { usage: { inputTokens: 10, outputTokens: 5 } });
  // @ts-expect-error scopes is required
  await sg.admit({ amount: "0.05" });
  // @ts-expect-error there is no period "year"
  await sg.getBudget("org:acme", "year");
}
