// The official OpenAI and Anthropic SDKs, unmodified but for their base URL
// and key, through `spendgate gateway` against a fake provider: plain and
// streaming calls of every API, the model list, usage present and absent, an upstream 500
// and 429, a stream cut mid-way (raised as the SDK's APIError with spendgate's code), an
// intermediary's 504 and 524 (charged, not retried), and budget denials. After each, the
// budgets hold exactly the fake's reported usage priced with the table (or
// the reservation of a call that may have been billed without a usage),
// denied calls never reached the fake, and nothing stays reserved.
//
//   SPENDGATE=/path/spendgate FAKELLM=/path/fakellm NATS_URL=nats://... npm test
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { start, stop, cli, api, upstreamCalls, micros, cost, UPSTREAM_KEY } from './harness.mjs';

const prices = { input: '2.5', output: '10', cached_input: '1.25' };
const run = Math.random().toString(36).slice(2, 8); // scopes of this run only
let env; // { gateway, openai, upstream }
let admin; // an HTTP API key with admin access

before(async () => {
  env = await start();
  for (const model of ['gpt-sdk', 'claude-sdk', 'embed-sdk']) {
    cli('pricing', 'put', '--model', model, '--input', prices.input, '--output', prices.output, '--cached-input', prices.cached_input);
  }
  admin = cli('keys', 'create', '--access', 'admin', '--name', 'sdk tests', '--secret-only');
});
after(() => stop());

// key makes a key on a fresh scope with a USD budget of limit; it returns
// the secret and the scope.
function key(limit = '10') {
  const scope = `team:sdk-${run}-${Math.random().toString(36).slice(2, 8)}`;
  cli('budget', 'put', '--scope', scope, '--period', 'month', '--limit', limit, '--unit', 'USD');
  return { secret: cli('keys', 'create', '--scope', scope, '--secret-only'), scope };
}

async function budget(scope) {
  const [status, body] = await api(env.gateway, admin, 'budget.get', { scope, period: 'month' });
  assert.equal(status, 200, JSON.stringify(body));
  return body;
}

// callsSince returns the fake's calls after the first n.
async function callsSince(n) {
  return (await upstreamCalls(env.upstream)).slice(n);
}

// settledAt checks that scope's budget holds exactly want (10^-12 units)
// and nothing reserved.
async function settledAt(scope, want) {
  const b = await budget(scope);
  assert.equal(b.reserved, '0', `${scope}: nothing stays reserved`);
  assert.equal(b.open, 0);
  assert.equal(micros(b.spent), want, `${scope}: spent ${b.spent}`);
}

test('OpenAI SDK: chat, completions, embeddings and responses, plain and streaming, settle the reported usage', async () => {
  const { secret, scope } = key();
  const openai = new OpenAI({ baseURL: env.openai, apiKey: secret });
  const n = (await upstreamCalls(env.upstream)).length;

  const chat = await openai.chat.completions.create({ model: 'gpt-sdk', messages: [{ role: 'user', content: 'hello fake:cached=4' }], max_tokens: 50 });
  assert.match(chat.choices[0].message.content, /^tok0 tok1/);
  assert.equal(chat.usage.prompt_tokens_details.cached_tokens, 4);

  // A stream that did not ask for usage: the content, and no usage chunk.
  const stream = await openai.chat.completions.create({ model: 'gpt-sdk', stream: true, messages: [{ role: 'user', content: 'hi' }], max_tokens: 50 });
  let text = '';
  for await (const chunk of stream) {
    assert.ok(chunk.choices.length > 0, 'no usage chunk reaches a caller that did not ask for one');
    text += chunk.choices[0]?.delta?.content ?? '';
  }
  assert.equal(text, 'tok0 tok1 tok2 tok3 tok4 tok5 tok6');

  // A stream that asked for usage gets it.
  const withUsage = await openai.chat.completions.create({ model: 'gpt-sdk', stream: true, stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'hi' }], max_tokens: 50 });
  let usage;
  for await (const chunk of withUsage) if (chunk.usage) usage = chunk.usage;
  assert.equal(usage.completion_tokens, 7);

  const completion = await openai.completions.create({ model: 'gpt-sdk', prompt: 'say fake:out=3', max_tokens: 20 });
  assert.equal(completion.choices[0].text, 'tok0 tok1 tok2');

  const emb = await openai.embeddings.create({ model: 'embed-sdk', input: ['a', 'b'] });
  assert.equal(emb.data.length, 2);
  assert.equal(emb.data[0].embedding.length, 3);

  const resp = await openai.responses.create({ model: 'gpt-sdk', input: 'hi', max_output_tokens: 64 });
  assert.equal(resp.output_text, 'tok0 tok1 tok2 tok3 tok4 tok5 tok6');

  const rstream = await openai.responses.create({ model: 'gpt-sdk', input: 'hi', stream: true });
  let completed;
  for await (const ev of rstream) if (ev.type === 'response.completed') completed = ev.response;
  assert.equal(completed.usage.output_tokens, 7);

  const calls = await callsSince(n);
  assert.equal(calls.length, 7);
  let want = 0n;
  for (const c of calls) {
    assert.equal(c.authorization, UPSTREAM_KEY, 'the upstream gets the gateway\'s key, never the caller\'s');
    assert.ok(c.usage, `${c.path} reported usage`);
    want += cost(c.usage, prices);
  }
  await settledAt(scope, want);
});

test('Anthropic SDK: messages, plain and streaming, settle the reported usage', async () => {
  const { secret, scope } = key();
  const anthropic = new Anthropic({ baseURL: env.gateway, apiKey: secret });
  const n = (await upstreamCalls(env.upstream)).length;

  const msg = await anthropic.messages.create({ model: 'claude-sdk', max_tokens: 64, messages: [{ role: 'user', content: 'hi fake:cached=2' }] });
  assert.equal(msg.content[0].text, 'tok0 tok1 tok2 tok3 tok4 tok5 tok6');
  assert.equal(msg.usage.cache_read_input_tokens, 2);

  const stream = anthropic.messages.stream({ model: 'claude-sdk', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] });
  let text = '';
  stream.on('text', (t) => { text += t; });
  const final = await stream.finalMessage();
  assert.equal(text, 'tok0 tok1 tok2 tok3 tok4 tok5 tok6');
  assert.equal(final.usage.output_tokens, 7);

  const calls = await callsSince(n);
  assert.equal(calls.length, 2);
  await settledAt(scope, calls.reduce((s, c) => s + cost(c.usage, prices), 0n));
});

test('both SDKs list the priced models through the gateway, and retrieve one', async () => {
  const { secret } = key();
  const n = (await upstreamCalls(env.upstream)).length;
  const openai = new OpenAI({ baseURL: env.openai, apiKey: secret });
  const ids = [];
  for await (const m of openai.models.list()) ids.push(m.id);
  for (const model of ['gpt-sdk', 'embed-sdk']) assert.ok(ids.includes(model), `${model} in ${ids}`);
  assert.ok(!ids.includes('claude-sdk'), `OpenAI's list has no Claude model: ${ids}`);
  assert.equal((await openai.models.retrieve('gpt-sdk')).id, 'gpt-sdk');
  await assert.rejects(openai.models.retrieve('gpt-unpriced'), OpenAI.NotFoundError);

  const anthropic = new Anthropic({ baseURL: env.gateway, apiKey: secret });
  const aids = [];
  for await (const m of anthropic.models.list()) aids.push(m.id);
  assert.ok(aids.includes('claude-sdk'), `claude-sdk in ${aids}`);
  assert.ok(aids.every((id) => id.startsWith('claude')), `Anthropic's list has its models only: ${aids}`);
  assert.equal((await anthropic.models.retrieve('claude-sdk')).display_name, 'claude-sdk');
  assert.equal((await callsSince(n)).length, 0, 'the list comes from the pricing table, not the provider');
});

test('upstream 500 and 429 reach the SDK as its errors and are released', async () => {
  const { secret, scope } = key();
  const openai = new OpenAI({ baseURL: env.openai, apiKey: secret, maxRetries: 0 });
  const anthropic = new Anthropic({ baseURL: env.gateway, apiKey: secret, maxRetries: 0 });
  await assert.rejects(openai.chat.completions.create({ model: 'gpt-sdk', messages: [{ role: 'user', content: 'fake:status=500' }], max_tokens: 5 }),
    (err) => err instanceof OpenAI.InternalServerError && err.status === 500);
  await assert.rejects(openai.chat.completions.create({ model: 'gpt-sdk', messages: [{ role: 'user', content: 'fake:status=429' }], max_tokens: 5 }),
    (err) => err instanceof OpenAI.RateLimitError && err.status === 429 && !String(err.message).includes('spendgate'));
  await assert.rejects(anthropic.messages.create({ model: 'claude-sdk', max_tokens: 5, messages: [{ role: 'user', content: 'fake:status=500' }] }),
    (err) => err instanceof Anthropic.InternalServerError);
  await settledAt(scope, 0n);
});

test('usage absent, a stream cut mid-way (the SDK\'s APIError with the code) and a 504 settle at the reservation', async () => {
  const { secret, scope } = key();
  const openai = new OpenAI({ baseURL: env.openai, apiKey: secret, maxRetries: 0 });
  let want = 0n;
  const reservedOf = (response) => micros(response.headers.get('x-spendgate-reserved').split(' ')[0]);

  const { data: plain, response: r1 } = await openai.chat.completions.create({ model: 'gpt-sdk',
    messages: [{ role: 'user', content: 'fake:nousage' }], max_tokens: 40 }).withResponse();
  assert.equal(plain.usage, undefined);
  want += reservedOf(r1);

  const { data: cut, response: r2 } = await openai.chat.completions.create({ model: 'gpt-sdk', stream: true,
    messages: [{ role: 'user', content: 'fake:cut' }], max_tokens: 40 }).withResponse();
  want += reservedOf(r2);
  // The gateway ends the stream in OpenAI's own error event: the SDK
  // raises its APIError with spendgate's code, not a bare connection drop.
  await assert.rejects(async () => { for await (const _ of cut); }, (err) => {
    assert.ok(err instanceof OpenAI.APIError, `an APIError, not ${err}`);
    assert.equal(err.code, 'upstream_cut');
    assert.equal(err.type, 'server_error');
    assert.match(err.message, /charged its reservation/);
    return true;
  });

  const anthropic = new Anthropic({ baseURL: env.gateway, apiKey: secret, maxRetries: 0 });
  const { data: acut, response: r3 } = await anthropic.messages.create({ model: 'claude-sdk', max_tokens: 40, stream: true,
    messages: [{ role: 'user', content: 'fake:cut' }] }).withResponse();
  want += reservedOf(r3);
  await assert.rejects(async () => { for await (const _ of acut); }, (err) => {
    assert.ok(err instanceof Anthropic.APIError, `an APIError, not ${err}`);
    assert.equal(err.error.error.type, 'api_error');
    assert.equal(err.error.error.code, 'upstream_cut');
    assert.match(err.message, /charged its reservation/);
    return true;
  });

  // A 504 (or 524) from an intermediary before the provider: the call may
  // have run, so it is charged and the SDK is told not to retry it.
  const started = Date.now();
  const r4 = await openai.chat.completions.create({ model: 'gpt-sdk', messages: [{ role: 'user', content: 'fake:status=504' }], max_tokens: 40 })
    .withResponse().then(() => assert.fail('a 504 must raise'), (err) => err);
  assert.ok(r4 instanceof OpenAI.InternalServerError, String(r4));
  assert.equal(r4.status, 502);
  assert.equal(r4.code, 'upstream_unreachable');
  assert.equal(r4.headers.get('x-should-retry'), 'false');
  want += micros(r4.headers.get('x-spendgate-reserved').split(' ')[0]);
  const retrying = new OpenAI({ baseURL: env.openai, apiKey: secret });
  await assert.rejects(retrying.chat.completions.create({ model: 'gpt-sdk', messages: [{ role: 'user', content: 'fake:status=524' }], max_tokens: 40 }).withResponse(),
    (err) => {
      assert.equal(err.code, 'upstream_unreachable');
      want += micros(err.headers.get('x-spendgate-reserved').split(' ')[0]);
      return true;
    });
  assert.ok(Date.now() - started < 400, 'x-should-retry: false: the SDK with retries on did not retry');

  // The gateway settles a cut call as it notices the cut; wait for it.
  for (let i = 0; i < 100 && (await budget(scope)).open > 0; i++) await new Promise((r) => setTimeout(r, 50));
  await settledAt(scope, want);
});

test('a denied call is the SDK\'s RateLimitError naming the budget, is not retried, and never reaches the upstream', async () => {
  // The key's own budget holds one call a month.
  const scope = `team:sdk-${run}-deny`;
  cli('budget', 'put', '--scope', scope, '--period', 'month', '--limit', '10', '--unit', 'USD');
  const secret = cli('keys', 'create', '--scope', scope, '--budget', '1', '--unit', 'requests', '--secret-only');
  const openai = new OpenAI({ baseURL: env.openai, apiKey: secret });
  const anthropic = new Anthropic({ baseURL: env.gateway, apiKey: secret });
  const n = (await upstreamCalls(env.upstream)).length;
  await openai.chat.completions.create({ model: 'gpt-sdk', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });
  const started = Date.now();
  await assert.rejects(openai.chat.completions.create({ model: 'gpt-sdk', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 }), (err) => {
    assert.ok(err instanceof OpenAI.RateLimitError, String(err));
    assert.equal(err.status, 429);
    assert.equal(err.code, 'limit_reached');
    assert.match(err.message, /budget key:[0-9a-f]+ per month/);
    assert.equal(err.error.spendgate.unit, 'requests');
    assert.ok(Number(err.headers.get('retry-after')) > 60, 'Retry-After is the month\'s reset');
    return true;
  });
  assert.ok(Date.now() - started < 400, 'x-should-retry: false: the SDK did not back off and retry');
  await assert.rejects(anthropic.messages.create({ model: 'claude-sdk', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }),
    (err) => err instanceof Anthropic.RateLimitError && /key:[0-9a-f]+/.test(err.message));
  assert.equal((await callsSince(n)).length, 1, 'denied calls never reach the upstream');
  const b = await budget(scope);
  assert.equal(b.reserved, '0');
  assert.notEqual(b.spent, '0');
});

test('a disabled key is refused; an unknown one is the SDK\'s AuthenticationError', async () => {
  const { secret } = key();
  const openai = new OpenAI({ baseURL: env.openai, apiKey: secret, maxRetries: 0 });
  await openai.chat.completions.create({ model: 'gpt-sdk', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });
  const id = secret.split('_')[1];
  cli('keys', 'disable', '--id', id);
  await new Promise((r) => setTimeout(r, 400)); // the gateway's --key-cache is 200ms
  await assert.rejects(openai.chat.completions.create({ model: 'gpt-sdk', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 }),
    (err) => err instanceof OpenAI.AuthenticationError && err.code === 'key_disabled');
  const stranger = new OpenAI({ baseURL: env.openai, apiKey: 'sk-not-a-spendgate-key', maxRetries: 0 });
  await assert.rejects(stranger.chat.completions.create({ model: 'gpt-sdk', messages: [], max_tokens: 5 }),
    (err) => err instanceof OpenAI.AuthenticationError);
});

test('the gateway quick start (docs/guide.md): a call succeeds, the next is denied with a 429', async () => {
  cli('pricing', 'put', '--model', 'gpt-4o-mini', '--input', '0.15', '--output', '0.60');
  const scope = `team:sdk-${run}-quick`;
  cli('budget', 'put', '--scope', scope, '--period', 'month', '--limit', '5.00', '--unit', 'USD');
  const secret = cli('keys', 'create', '--scope', scope, '--budget', '1', '--unit', 'requests', '--secret-only');
  const out = execFileSync(process.execPath, ['quickstart.mjs'], { env: { ...process.env, SPENDGATE_KEY: secret, GATEWAY_URL: env.openai }, encoding: 'utf8' });
  assert.match(out, /first call: tok0/);
  assert.match(out, /second call: denied, 429 limit_reached: spendgate: budget key:[0-9a-f]+ per month \(\d{4}-\d\d\) is spent: limit 1 requests/);
  assert.match(out, /retry after \d+ s/);
});
