import { Redis } from 'ioredis';

/**
 * The Redis connection a node keeps when `redisUrl` is set (what the nodes of a cluster count
 * together). Requests never wait for it: commands fail at once while it is away (no offline
 * queue, one try), and the callers decide what that means (the webhook limit fails open).
 * It reconnects by itself; `up` says whether it answers now.
 */
export interface SharedRedis {
  readonly client: Redis;
  /** The key prefix of this cluster (config.redisPrefix). */
  readonly prefix: string;
  /** Whether a PING answers within a second. */
  ping(): Promise<boolean>;
  close(): Promise<void>;
}

export function openRedis(url: string, prefix: string, onError: (err: Error) => void): SharedRedis {
  const client = new Redis(url, {
    lazyConnect: false,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    connectTimeout: 2_000,
    // Keep trying to reconnect, at most every 2 s.
    retryStrategy: (times) => Math.min(times * 200, 2_000),
  });
  let lastLogged = 0;
  client.on('error', (err: Error) => {
    // A server that is away says so on every retry: once a minute is enough.
    if (Date.now() - lastLogged < 60_000) return;
    lastLogged = Date.now();
    onError(err);
  });
  return {
    client,
    prefix,
    async ping() {
      if (client.status !== 'ready') return false;
      try {
        return (await Promise.race([client.ping(), new Promise<null>((r) => setTimeout(() => r(null), 1_000).unref())])) === 'PONG';
      } catch {
        return false;
      }
    },
    async close() {
      client.disconnect();
    },
  };
}
