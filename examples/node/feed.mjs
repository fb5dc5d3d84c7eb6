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
import { jetstream, jetstreamManager, AckPolicy, DeliverPolicy } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";

export const FEED_STREAM = "spendgate_feed";
export const FEED_PREFIX = "spendgate.feed.v1.";

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
 * each event once per cursor. It returns after `until(cursor)` is true, or
 * when nothing arrives for idleMs. handle runs before the ack: if the process
 * dies in between, the event comes again and the cursor skips it.
 */
export async function follow(nc, durable, cursor, handle, { stream = FEED_STREAM, idleMs = 5000, until = () => false } = {}) {
  const js = jetstream(nc);
  const c = await js.consumers.get(stream, durable);
  let skipped = 0;
  while (!until(cursor)) {
    const m = await c.next({ expires: idleMs });
    if (m === null) break;
    const ev = m.json();
    if (ev.schema !== "feed.v1" || ev.id !== `${ev.source_seq}-${ev.index}`) throw new Error(`not a feed.v1 message: ${m.subject}`);
    if (cursor.next(ev)) await handle(ev);
    else skipped++;
    await m.ackAck();
  }
  return { skipped };
}
