import { createHash, randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { LocalWindows, type Windows, type WindowRule } from './rateLimit.js';

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

/**
 * Sliding windows kept in Redis, shared by every node on it: one sorted set of event times
 * per key (members unique per event), trimmed to the newest `limit` times and expiring with
 * the window, changed by one script so that check-and-count is atomic across nodes. Keys are
 * hashed (an email or address never appears in Redis, and a long one costs no more). While
 * Redis does not answer, the node's own windows decide (`local`): a limit degrades to per
 * node, N nodes allowing N times it, rather than refusing everyone or waiting.
 */
export class RedisWindows implements Windows {
  private seq = 0;
  private readonly node = randomBytes(6).toString('base64url');

  constructor(
    private readonly redis: SharedRedis,
    private readonly name: string,
    readonly local: Windows = new LocalWindows(),
  ) {
    if (!('svcWindow' in redis.client)) redis.client.defineCommand('svcWindow', { numberOfKeys: 1, lua: WINDOW_SCRIPT });
  }

  private key(key: string): string {
    return `${this.redis.prefix}${this.name}:${createHash('sha256').update(key).digest('base64url')}`;
  }

  /** Runs the script, or undefined when Redis cannot answer now (the caller uses `local`). */
  private async script(mode: 'check' | 'add' | 'take', key: string, rule: WindowRule, now: number): Promise<number | undefined> {
    if (this.redis.client.status !== 'ready') return undefined;
    const client = this.redis.client as unknown as WindowClient;
    try {
      const ms = Number(await client.svcWindow(this.key(key), now, rule.windowMs, rule.limit, mode, `${now}:${this.node}:${this.seq++}`));
      return Number.isFinite(ms) ? Math.max(0, ms) / 1000 : undefined;
    } catch {
      return undefined;
    }
  }

  async retryAfter(key: string, rule: WindowRule, now = Date.now()): Promise<number> {
    const wait = await this.script('check', key, rule, now);
    return wait === undefined ? this.local.retryAfter(key, rule, now) : wait > 0 ? Math.max(0.001, wait) : 0;
  }

  async add(key: string, rule: WindowRule, now = Date.now()): Promise<void> {
    if ((await this.script('add', key, rule, now)) === undefined) await this.local.add(key, rule, now);
  }

  async take(key: string, rule: WindowRule, now = Date.now()): Promise<number> {
    const wait = await this.script('take', key, rule, now);
    return wait === undefined ? this.local.take(key, rule, now) : wait > 0 ? Math.max(0.001, wait) : 0;
  }

  async delete(key: string): Promise<void> {
    await this.local.delete(key);
    if (this.redis.client.status !== 'ready') return;
    await this.redis.client.del(this.key(key)).catch(() => undefined);
  }
}

/** Windows shared through Redis when the node has it, else the node's own. */
export function windowsFor(redis: SharedRedis | undefined, name: string): Windows {
  return redis ? new RedisWindows(redis, name) : new LocalWindows();
}

interface WindowClient {
  svcWindow(key: string, now: number, windowMs: number, limit: number, mode: string, member: string): Promise<string>;
}

/**
 * KEYS[1] the window; ARGV now (ms), window (ms), limit, mode (check | add | take), member.
 * Returns the milliseconds to wait ("0" when under the limit; check and take then count
 * nothing more, take counts one event when under it, add always counts one).
 */
const WINDOW_SCRIPT = `
local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local mode = ARGV[4]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
if mode ~= 'add' then
  local n = redis.call('ZCARD', key)
  if n >= limit then
    local at = redis.call('ZRANGE', key, n - limit, n - limit, 'WITHSCORES')
    return tostring(tonumber(at[2]) + window - now)
  end
  if mode == 'check' then return '0' end
end
redis.call('ZADD', key, now, ARGV[5])
redis.call('ZREMRANGEBYRANK', key, 0, -(limit + 1))
redis.call('PEXPIRE', key, window)
return '0'
`;
