// Starts what the SDK tests need around a running `spendgate serve`
// ($NATS_URL): the fake provider ($FAKELLM, internal/fakellm's command) and
// `spendgate gateway` ($SPENDGATE) in front of it, on free ports; and runs
// spendgate's CLI.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export const SPENDGATE = process.env.SPENDGATE ?? 'spendgate';
export const FAKELLM = process.env.FAKELLM ?? 'fakellm';
export const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
// The upstream's own key: the gateway's, never a caller's.
export const UPSTREAM_KEY = 'sk-fake-upstream-7777';

const children = [];
// Whatever ends this process ends what it started.
process.on('exit', () => stop());

// cli runs spendgate with args and returns its stdout.
export function cli(...args) {
  return execFileSync(SPENDGATE, args, { env: { ...process.env, SPENDGATE_NATS_URL: NATS_URL }, encoding: 'utf8' }).trim();
}

// cliFails runs spendgate and returns its exit status and stdout (for a
// command expected to fail).
export function cliFails(...args) {
  try {
    return { status: 0, stdout: cli(...args) };
  } catch (err) {
    return { status: err.status, stdout: String(err.stdout) };
  }
}

async function freePort() {
  const srv = createServer();
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address();
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

async function waitFor(what, f, ms = 15000) {
  const until = Date.now() + ms;
  for (;;) {
    try {
      if (await f()) return;
    } catch {}
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// start starts the fake provider and a gateway in front of it and returns
// their URLs: gateway (its root), openai (its OpenAI base URL), upstream.
export async function start() {
  const fake = spawn(FAKELLM, ['--listen', '127.0.0.1:0', '--key', UPSTREAM_KEY], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(fake);
  const upstream = await new Promise((resolve, reject) => {
    createInterface({ input: fake.stdout }).once('line', resolve);
    fake.once('exit', (code) => reject(new Error(`fakellm exited ${code}`)));
  });
  const port = await freePort();
  // Its journal in a directory of its own: one gateway per journal file.
  const journal = join(mkdtempSync(join(tmpdir(), 'spendgate-gateway-')), 'gateway.journal');
  const gw = spawn(SPENDGATE, ['gateway', '--listen', `127.0.0.1:${port}`, '--nats-url', NATS_URL, '--key-cache', '200ms',
    '--upstream', `openai=${upstream}/v1`, '--upstream', `anthropic=${upstream}`, '--journal', journal],
  { stdio: ['ignore', 'inherit', process.env.GATEWAY_LOG ? 'inherit' : 'ignore'],
    env: { ...process.env, OPENAI_API_KEY: UPSTREAM_KEY, ANTHROPIC_API_KEY: UPSTREAM_KEY } });
  children.push(gw);
  const gateway = `http://127.0.0.1:${port}`;
  await waitFor('the gateway', async () => (await fetch(`${gateway}/readyz`)).ok);
  return { gateway, openai: `${gateway}/v1`, upstream };
}

// stop ends every process start started.
export function stop() {
  for (const c of children) if (c.exitCode === null) c.kill();
}

// upstreamCalls returns the calls the fake provider answered.
export async function upstreamCalls(upstream) {
  return (await fetch(`${upstream}/fake/calls`)).json();
}

// api calls the gateway's HTTP API with key and returns [status, body].
export async function api(gateway, key, endpoint, body) {
  const res = await fetch(`${gateway}/spendgate/${endpoint}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return [res.status, await res.json()];
}

// micros parses a decimal string into an exact BigInt of 10^-12 units.
export function micros(s) {
  const [int, frac = ''] = String(s).split('.');
  return BigInt(int) * 10n ** 12n + BigInt((frac + '0'.repeat(12)).slice(0, 12));
}

// cost is what a usage costs at prices per million tokens (decimal
// strings), in 10^-12 units: (input - cached) x in + cached x cachedIn +
// output x out, each price per million.
export function cost(u, prices) {
  const p = (s) => micros(s) / 10n ** 6n; // price of one token, 10^-12 units
  return BigInt(u.input_tokens - u.cached_input_tokens) * p(prices.input) +
    BigInt(u.cached_input_tokens) * p(prices.cached_input ?? prices.input) +
    BigInt(u.output_tokens) * p(prices.output);
}
