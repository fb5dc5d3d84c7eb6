// Following spendgate's live event feed (feed.v1) from Node.js with a durable
// JetStream consumer, resuming after a restart without missing or doubling an
// event.
//
// The feed is the stream "spendgate_feed" (serve --feed): one message per
// ledger event, in commit order, subject
//   spendgate.feed.v1.<event type>.<scope kind>.<scope id>
// and body {schema:"feed.v1", id:"<source_seq>-<index>", source_seq, index,
// key, committed_at, type, balance, event}. The ids increase in feed order.
//
// Exactly once = at-least-once delivery + a cursor:
//  - the durable consumer delivers one event at a time (max_ack_pending 1),
//    so a redelivery never comes after a newer event, and redelivers an event
//    whose ack was lost (ack_wait after a crash);
//  - the cursor is the position of the last event processed; store it with
//    the effect of processing (same transaction) and skip anything at or
//    before it.
//
// Believe only signed messages: whoever may publish to the feed's subjects
// can append a message that looks like an event (one with a large
// source_seq would move the cursor past every real event to come). Each
// message carries its replica's public key (Spendgate-Sig-Key, an nkey) and
// an Ed25519 signature (Spendgate-Sig) of "spendgate.feed.v1\n" + subject +
// "\n" + body; verifyFeedMessage checks both against the replicas' trusted
// keys (the serve's trusted-keys file), with node:crypto alone.
//
// Run as a program, it follows the feed and prints a line per event until
// Ctrl-C (with --until-idle: until nothing arrives for 2 s):
//   NATS_URL=nats://127.0.0.1:4222 node feed.mjs
// SPENDGATE_TRUSTED_KEYS is the serve's trusted-keys file (default:
// ../../spendgate-data/trusted-keys, the quick start's), FEED_DURABLE the
// consumer's name (default feed-example), FEED_FILTER a subject filter
// (default every event). The cursor lives in memory here: a real consumer
// stores it with what it does with each event.
import { createPublicKey, verify } from "node:crypto";
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { jetstream, jetstreamManager, AckPolicy, DeliverPolicy } from "@nats-io/jetstream";
import { connect, nanos } from "@nats-io/transport-node";

export const FEED_STREAM = "spendgate_feed";
export const FEED_PREFIX = "spendgate.feed.v1.";

const BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const NKEY_USER = 20 << 3; // the prefix byte of a public nkey starting with "U"
const ED25519_SPKI = Buffer.from("302a300506032b6570032100", "hex"); // DER prefix of a raw Ed25519 public key

function crc16(bytes) { // CRC-16/XMODEM, as nkeys checksum them
  let crc = 0;
  for (const b of bytes) {
    crc ^= b << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/**
 * nkeyPublicKey turns a public nkey ("U" + 55 base32 characters: a prefix
 * byte, the 32-byte Ed25519 key, a little-endian CRC-16) into a KeyObject
 * for node:crypto's verify. It throws on anything else.
 */
export function nkeyPublicKey(nkey) {
  const out = [];
  let bits = 0, acc = 0;
  for (const c of nkey) {
    const v = BASE32.indexOf(c);
    if (v < 0) throw new Error(`not an nkey: ${nkey}`);
    acc = (acc << 5) | v;
    bits += 5;
    if (bits >= 8) {
      out.push((acc >>> (bits - 8)) & 0xff);
      bits -= 8;
    }
  }
  const raw = Buffer.from(out);
  if (raw.length !== 35 || raw[0] !== NKEY_USER || crc16(raw.subarray(0, 33)) !== raw.readUInt16LE(33)) {
    throw new Error(`not a public nkey: ${nkey}`);
  }
  return createPublicKey({ key: Buffer.concat([ED25519_SPKI, raw.subarray(1, 33)]), format: "der", type: "spki" });
}

/**
 * parseTrustedKeys reads a trusted-keys file (one public key a line, "#"
 * comment lines, "KEY until=N" for a key trusted only up to source_seq N,
 * "KEY distrusted" for one never trusted) into a Map key -> {key, until}.
 */
export function parseTrustedKeys(text) {
  const trusted = new Map();
  for (const line of text.split("\n")) {
    const [key, ...words] = (line.trim().startsWith("#") ? "" : line.trim()).split(/\s+/);
    // "unsigned until=N" is about the ledger's history, never a feed message.
    if (!key || key === "unsigned" || words.includes("distrusted")) continue;
    const until = words.find((w) => w.startsWith("until="));
    trusted.set(key, { key: nkeyPublicKey(key), until: until ? Number(until.slice(6)) : Infinity });
  }
  return trusted;
}

/**
 * verifyFeedMessage returns the message's event if a trusted key signed it
 * (for its source_seq), else null: acknowledge such a message and ignore it.
 */
export function verifyFeedMessage(m, trusted) {
  const signer = trusted.get(m.headers?.get("Spendgate-Sig-Key") ?? "");
  const sig = m.headers?.get("Spendgate-Sig") ?? "";
  if (!signer || !sig) return null;
  const signed = Buffer.concat([Buffer.from(`spendgate.feed.v1\n${m.subject}\n`), m.data]);
  if (!verify(null, signed, signer.key, Buffer.from(sig, "base64url"))) return null;
  const ev = m.json();
  if (ev.schema !== "feed.v1" || ev.id !== `${ev.source_seq}-${ev.index}` || ev.source_seq > signer.until) return null;
  return ev;
}

/** ensureConsumer creates (or updates) the durable consumer `durable`. */
export async function ensureConsumer(nc, durable, { filter = FEED_PREFIX + ">", ackWaitMs = 5000, stream = FEED_STREAM } = {}) {
  // checkAPI false: no account-info call, which the feed role may not make.
  const jsm = await jetstreamManager(nc, { checkAPI: false });
  await jsm.consumers.add(stream, {
    durable_name: durable,
    filter_subject: filter,
    deliver_policy: DeliverPolicy.All,
    ack_policy: AckPolicy.Explicit,
    max_ack_pending: 1,
    ack_wait: nanos(ackWaitMs),
  });
}

/** Cursor is the position of the last event processed: {seq, index}. */
export class Cursor {
  constructor(last = { seq: 0, index: -1 }) {
    this.last = last;
  }
  /** next reports whether ev is new and, if so, moves the cursor to it. */
  next(ev) {
    const { seq, index } = this.last;
    if (ev.source_seq < seq || (ev.source_seq === seq && ev.index <= index)) return false;
    this.last = { seq: ev.source_seq, index: ev.index };
    return true;
  }
}

/**
 * follow delivers the feed to handle(event) through the durable consumer,
 * each event once per cursor, and only events a trusted key signed
 * (trusted: parseTrustedKeys' map); any other message is acknowledged,
 * counted as forged and ignored. It returns after `until(cursor)` is true,
 * or when nothing arrives for idleMs. handle runs before the ack: if the
 * process dies in between, the event comes again and the cursor skips it.
 */
export async function follow(nc, durable, cursor, handle, { trusted, stream = FEED_STREAM, idleMs = 5000, until = () => false } = {}) {
  if (!(trusted instanceof Map) || trusted.size === 0) throw new Error("follow needs the replicas' trusted keys");
  const js = jetstream(nc);
  const c = await js.consumers.get(stream, durable);
  let skipped = 0, forged = 0;
  while (!until(cursor)) {
    const m = await c.next({ expires: idleMs });
    if (m === null) break;
    const ev = verifyFeedMessage(m, trusted);
    if (ev === null) forged++; // worth an alert: someone wrote to the feed
    else if (cursor.next(ev)) await handle(ev);
    else skipped++;
    await m.ackAck();
  }
  return { skipped, forged };
}

/** describe is a one-line account of a feed event. */
export function describe(ev) {
  const e = ev.event ?? {};
  const scope = ev.balance?.ref?.scope ?? e.balance?.scope ?? e.scope ?? e.budget?.scope ?? "";
  const amount = e.actual ?? e.amount ?? e.limit ?? "";
  return [ev.id, ev.type, scope, amount].filter((x) => x !== "").join("  ");
}

async function main() {
  const url = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
  const keys = process.env.SPENDGATE_TRUSTED_KEYS ?? new URL("../../spendgate-data/trusted-keys", import.meta.url);
  let text;
  try {
    text = readFileSync(keys, "utf8");
  } catch (err) {
    console.error(`cannot read the replicas' trusted keys (${err.message}): set SPENDGATE_TRUSTED_KEYS to the trusted-keys file in the data directory \`spendgate serve --data-dir\` uses`);
    process.exit(1);
  }
  const trusted = parseTrustedKeys(text);
  const durable = process.env.FEED_DURABLE ?? "feed-example";
  const untilIdle = process.argv.includes("--until-idle");
  const nc = await connect({ servers: url, maxReconnectAttempts: -1 });
  try {
    await ensureConsumer(nc, durable, { filter: process.env.FEED_FILTER ?? FEED_PREFIX + ">" });
    const cursor = new Cursor();
    let stop = false;
    process.once("SIGINT", () => { stop = true; });
    let forged = 0;
    do {
      const r = await follow(nc, durable, cursor, (ev) => console.log(describe(ev)), { trusted, idleMs: 2000, until: () => stop });
      forged += r.forged;
    } while (!untilIdle && !stop);
    if (forged > 0) console.error(`ignored ${forged} message(s) that no trusted key signed`);
  } finally {
    await nc.close();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err) => {
    console.error(err.message ?? err);
    process.exit(1);
  });
}
