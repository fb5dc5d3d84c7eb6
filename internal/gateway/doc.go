// Package gateway is spendgate's front door for LLM code: an HTTP reverse
// proxy that speaks the OpenAI API (/v1/chat/completions, /v1/completions,
// /v1/embeddings, /v1/responses) and the Anthropic Messages API
// (/v1/messages), so that an SDK pointed at it (its base URL and key
// changed, nothing else) has every call capped by spendgate budgets.
//
// For every call it:
//
//   - resolves the caller's key (Authorization: Bearer, or x-api-key) to
//     the scopes of the ledger's key table (Keys, cached for a bounded
//     time), and refuses a missing, unknown or disabled key (401);
//   - prices the call from the pricing table: the model, the input
//     estimated from the body (estimateInput: an upper bound without a
//     tokenizer), and the most output it may produce (max_tokens and its
//     kin, or Config.MaxOutputTokens), and admits it against every scope
//     of the key, all or none, with a request id derived from the
//     caller's Idempotency-Key when it sends one; a call that asks for a
//     billing option the table does not price (a service tier above
//     standard, a hosted tool billed per call, Anthropic's context-1m
//     beta: billing.go) is refused before its admit, 400
//     CodeUnpricedOption, never sent;
//   - answers a denial as the SDKs expect (429, the provider's error
//     shape naming the budget and the reason, Retry-After at the period's
//     reset when that is when it frees up; 400 exceeds_budget_limit, with
//     no Retry-After, for a call larger than a budget's whole limit), and
//     fails closed (503) when the ledger does not answer: a denied call
//     never reaches the upstream;
//   - forwards the call with the upstream's own key (which never reaches
//     the caller), streaming included: server-sent events pass through
//     one by one as they come;
//   - settles with the usage the provider reported (the body's "usage",
//     the last streaming chunk, which it asks for with
//     stream_options.include_usage when the caller did not and then takes
//     out of what the caller sees, Responses' response.completed, or
//     Anthropic's message_start and message_delta), before the caller
//     sees the answer's end; releases a call the upstream refused (not
//     2xx) or never received; and settles at the reservation a call that
//     may have been billed without a usage to show for it (no usage, an
//     answer cut mid-way); a caller that leaves before the answer's end
//     does not end the call upstream: its answer is read on, for at most
//     Config.DrainAbandoned, and settled from its usage (note
//     caller_gone), or at the reservation when none came (abandon.go);
//     a settle or release the ledger does not answer is retried in the
//     background (retry.go);
//   - counts it (Metrics) and logs one line.
//
// The gateway is a client of the ledger, like any service: it talks to
// the replicas over NATS through package client (whose calls coalesce into
// batch messages under load), one client per tenant (ClientSet).
package gateway
