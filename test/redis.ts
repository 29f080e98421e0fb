import { randomBytes } from 'node:crypto';
import { skipOutsideCI, UNDER_CI } from './ci.js';

/**
 * The Redis server the tests may use (`SVC_TEST_REDIS_URL`, as .ci/run sets it), or undefined
 * when it is not set outside CI. Under CI=true it must be set.
 */
export function testRedisServer(): string | undefined {
  const url = process.env.SVC_TEST_REDIS_URL;
  if (!url && UNDER_CI) throw new Error('under CI=true SVC_TEST_REDIS_URL must be set: the shared limits are tested on Redis');
  return url || undefined;
}

/** Why a Redis test is skipped here (throws under CI, where it must run), or false. */
export function skipOutsideCIWithoutRedis(): string | false {
  return testRedisServer() ? false : skipOutsideCI('SVC_TEST_REDIS_URL is not set');
}

/** A key prefix of its own for one test's nodes, so that tests sharing the server never share counts. */
export function testRedisPrefix(): string {
  return `svc-test-${process.pid}-${randomBytes(4).toString('hex')}:`;
}
