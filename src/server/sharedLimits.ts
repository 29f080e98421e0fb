import LocalStore from '@fastify/rate-limit/store/LocalStore.js';
import RedisStore from '@fastify/rate-limit/store/RedisStore.js';
import type { SharedRedis } from '../core/redis.js';

/**
 * A @fastify/rate-limit store for limits counted across the nodes of a cluster: in Redis
 * (the library's own script, one INCR and expiry per request) while it answers, and on this
 * node alone while it does not. So Redis going away degrades the limit to per node (each
 * node allows the limit: N nodes N times it) instead of dropping it or refusing requests;
 * no request waits for Redis and none is refused because of it. The counts start again
 * in Redis when it answers.
 */
export function sharedLimitStore(redis: SharedRedis, name: string) {
  return class SharedLimitStore implements RateLimitStore {
    private readonly remote: RateLimitStore;
    private readonly local: RateLimitStore;

    constructor(params: { continueExceeding?: boolean; exponentialBackoff?: boolean }, remote?: RateLimitStore, local?: RateLimitStore) {
      const continueExceeding = params.continueExceeding ?? false;
      const exponentialBackoff = params.exponentialBackoff ?? false;
      this.remote = remote ?? new RedisStore(continueExceeding, exponentialBackoff, redis.client, `${redis.prefix}${name}:`);
      this.local = local ?? new LocalStore(continueExceeding, exponentialBackoff);
    }

    incr(key: string, cb: (err: Error | null, result: RateLimitStoreResult | null) => void, timeWindow: number, max: number): void {
      if (redis.client.status !== 'ready') return this.local.incr(key, cb, timeWindow, max);
      this.remote.incr(key, (err, result) => (err ? this.local.incr(key, cb, timeWindow, max) : cb(null, result)), timeWindow, max);
    }

    child(routeOptions: unknown): RateLimitStore {
      return new SharedLimitStore({}, this.remote.child(routeOptions), this.local.child(routeOptions));
    }
  };
}
