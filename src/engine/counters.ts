import { isMainThread } from 'node:worker_threads';

/** One count of delivery attempts that reached an end (SENT or FAILED). */
export interface DeliveryCount {
  channel: string;
  provider: string;
  status: 'SENT' | 'FAILED';
  n: number;
}

/**
 * Deliveries counted in this process since it started, for the metrics. Sends happen in
 * the engine's worker threads (and, for test emails, on the main thread); a thread keeps
 * its counts here and hands them to the main thread in batches (see worker.ts), which adds
 * them with addDeliveryCounts. Nothing here reads the database: a scrape costs no query.
 */
const totals = new Map<string, DeliveryCount>();
let pending = new Map<string, DeliveryCount>();
let flusher: ((counts: DeliveryCount[]) => void) | undefined;
let scheduled = false;

function add(into: Map<string, DeliveryCount>, c: Omit<DeliveryCount, 'n'>, n: number): void {
  const key = `${c.channel}\u0000${c.provider}\u0000${c.status}`;
  const entry = into.get(key);
  if (entry) entry.n += n;
  else into.set(key, { channel: c.channel, provider: c.provider, status: c.status, n });
}

/** Counts one delivery attempt that ended SENT or FAILED. */
export function countDelivery(channel: string, provider: string, status: 'SENT' | 'FAILED'): void {
  if (isMainThread || !flusher) {
    add(totals, { channel, provider, status }, 1);
    return;
  }
  add(pending, { channel, provider, status }, 1);
  if (!scheduled) {
    scheduled = true;
    setImmediate(flushDeliveryCounts);
  }
}

/** In a worker thread: sends the counts not yet sent (batched per turn of the event loop). */
export function flushDeliveryCounts(): void {
  scheduled = false;
  if (!pending.size) return;
  const counts = [...pending.values()];
  pending = new Map();
  flusher?.(counts);
}

/** In a worker thread: where this thread's counts go (the engine's channel). */
export function setDeliveryFlusher(fn: (counts: DeliveryCount[]) => void): void {
  flusher = fn;
}

/** On the main thread: counts a worker thread reported. */
export function addDeliveryCounts(counts: readonly DeliveryCount[]): void {
  for (const c of counts) add(totals, c, c.n);
}

/** Every count so far (a copy). */
export function deliveryTotals(): DeliveryCount[] {
  return [...totals.values()].map((c) => ({ ...c }));
}
