import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { SharedRedis } from './redis.js';

/**
 * Signals between the nodes of a cluster, over Redis pub/sub (`<prefix>wake`): a node that
 * has just queued runs wakes the engines of the others, so that an idle node takes up work
 * at once instead of at its next poll, and every node can poll the database slowly.
 *
 * A signal only makes something happen sooner: each engine still polls, so a signal lost
 * (Redis away, a node reconnecting) delays a run by at most one poll and loses nothing.
 * Publishing is coalesced (one message per `coalesceMs` at most, however many runs were
 * queued meanwhile) and a node ignores its own messages.
 */
export interface ClusterSignals {
  /** Tells the other nodes that runs are waiting. Never throws, never waits. */
  wake(): void;
  close(): Promise<void>;
}

/** `handlers.wake` is called when another node woke this one; a node without it (no engine) only sends. */
export function clusterSignals(redis: SharedRedis, handlers: { wake?: () => void }, opts: { coalesceMs?: number } = {}): ClusterSignals {
  const coalesceMs = opts.coalesceMs ?? 20;
  const channel = `${redis.prefix}wake`;
  const self = randomBytes(8).toString('base64url');
  let subscriber: Redis | undefined;
  const onWake = handlers.wake;
  if (onWake) {
    // A subscribed connection can do nothing else: a second one, as ioredis requires.
    const sub = redis.client.duplicate();
    sub.on('error', () => undefined); // the main connection logs Redis being away
    // Subscribes again after every reconnection (the first subscribe may come before Redis answers).
    sub.on('ready', () => void sub.subscribe(channel).catch(() => undefined));
    sub.on('message', (_channel: string, from: string) => {
      if (from !== self) onWake();
    });
    subscriber = sub;
  }
  let pending: NodeJS.Timeout | undefined;
  let lastSent = 0;
  const send = () => {
    pending = undefined;
    lastSent = Date.now();
    if (redis.client.status === 'ready') redis.client.publish(channel, self).catch(() => undefined);
  };
  return {
    wake() {
      if (pending) return;
      const wait = lastSent + coalesceMs - Date.now();
      if (wait <= 0) send();
      else pending = setTimeout(send, wait);
    },
    async close() {
      if (pending) clearTimeout(pending);
      subscriber?.disconnect();
    },
  };
}
