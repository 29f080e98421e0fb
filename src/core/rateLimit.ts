import { RateLimitError } from './errors.js';

/** A limit: at most `limit` events per `windowMs` for one key. */
export interface WindowRule {
  limit: number;
  windowMs: number;
}

/**
 * Event times per key in sliding windows, kept in memory and bounded: past `maxEntries`
 * keys the least recently hit key is evicted, and a key whose events all left its window
 * is dropped when read, so a flood of made-up keys can neither grow it nor wipe every
 * other key's count. Only the newest `limit` times of a key are kept (older ones cannot
 * change a decision).
 */
export class WindowCounter {
  private readonly hits = new Map<string, number[]>();

  constructor(private readonly maxEntries = 50_000) {}

  /** How many keys are held (for tests and metrics). */
  get size(): number {
    return this.hits.size;
  }

  /** The times of `key` still inside the window. */
  recent(key: string, rule: WindowRule, now = Date.now()): number[] {
    const list = this.hits.get(key);
    if (!list) return [];
    const kept = list.filter((t) => now - t < rule.windowMs);
    if (!kept.length) this.hits.delete(key);
    else if (kept.length !== list.length) this.hits.set(key, kept);
    return kept;
  }

  /** Seconds until `key` is under its limit again, or 0 when it is under it now. */
  retryAfter(key: string, rule: WindowRule, now = Date.now()): number {
    const list = this.recent(key, rule, now);
    if (list.length < rule.limit) return 0;
    return Math.max(0.001, (list[list.length - rule.limit]! + rule.windowMs - now) / 1000);
  }

  add(key: string, rule: WindowRule, now = Date.now()): void {
    const list = [...this.recent(key, rule, now), now].slice(-rule.limit);
    this.hits.delete(key); // re-inserted last: Map order is least recently hit first
    this.hits.set(key, list);
    while (this.hits.size > this.maxEntries) this.hits.delete(this.hits.keys().next().value as string);
  }

  delete(key: string): void {
    this.hits.delete(key);
  }
}

/**
 * Sliding windows of event times that the nodes of a cluster may share: the same decisions
 * as WindowCounter, asynchronous so that they can be kept in Redis.
 */
export interface Windows {
  /** Seconds until `key` is under its limit again, or 0 when it is under it now. */
  retryAfter(key: string, rule: WindowRule, now?: number): Promise<number>;
  add(key: string, rule: WindowRule, now?: number): Promise<void>;
  /** Counts one event unless `key` is at its limit; returns 0 when counted, else the seconds to wait. */
  take(key: string, rule: WindowRule, now?: number): Promise<number>;
  delete(key: string): Promise<void>;
}

/** The windows of one node, in memory (see WindowCounter). */
export class LocalWindows implements Windows {
  constructor(readonly counter = new WindowCounter()) {}

  async retryAfter(key: string, rule: WindowRule, now = Date.now()): Promise<number> {
    return this.counter.retryAfter(key, rule, now);
  }

  async add(key: string, rule: WindowRule, now = Date.now()): Promise<void> {
    this.counter.add(key, rule, now);
  }

  async take(key: string, rule: WindowRule, now = Date.now()): Promise<number> {
    const wait = this.counter.retryAfter(key, rule, now);
    if (wait === 0) this.counter.add(key, rule, now);
    return wait;
  }

  async delete(key: string): Promise<void> {
    this.counter.delete(key);
  }
}

/** The RateLimitError of a caller limit. */
export function rateLimited(rule: WindowRule, what: string, wait: number): RateLimitError {
  return new RateLimitError('rate_limited', `More than ${rule.limit} ${what} in ${Math.round(rule.windowMs / 1000)} s; retry after ${Math.ceil(wait)} s`, wait);
}

/**
 * Counts one event of `key` against its rule, or throws 429 `rate_limited` (with
 * Retry-After) when the key is already at its limit; a refused event is not counted.
 */
export async function takeOrThrow(windows: Windows, key: string, rule: WindowRule, what: string): Promise<void> {
  const wait = await windows.take(key, rule);
  if (wait > 0) throw rateLimited(rule, what, wait);
}
