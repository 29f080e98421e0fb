// The stores @fastify/rate-limit ships (it exports no types for them); sharedLimits.ts combines them.
interface RateLimitStoreResult {
  current: number;
  ttl: number;
}
interface RateLimitStore {
  incr(key: string, cb: (err: Error | null, result: RateLimitStoreResult | null) => void, timeWindow: number, max: number): void;
  child(routeOptions: unknown): RateLimitStore;
}
declare module '@fastify/rate-limit/store/RedisStore.js' {
  const RedisStore: new (continueExceeding: boolean, exponentialBackoff: boolean, redis: unknown, key?: string) => RateLimitStore;
  export default RedisStore;
}
declare module '@fastify/rate-limit/store/LocalStore.js' {
  const LocalStore: new (continueExceeding: boolean, exponentialBackoff: boolean, cache?: number) => RateLimitStore;
  export default LocalStore;
}
