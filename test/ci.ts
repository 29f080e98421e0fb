/**
 * Whether the tests run under CI (`CI=true`, as .ci/run sets it). There a tool the tests need
 * (Chromium, a tmpfs mount, an old Node) must be present: a test that cannot run fails the run
 * instead of skipping.
 */
export const UNDER_CI = process.env.CI === 'true';

/** The reason to skip with, outside CI; under CI it throws, so the test or file fails. */
export function skipOutsideCI(reason: string): string {
  if (UNDER_CI) throw new Error(`under CI=true this test must run, not skip: ${reason}`);
  return reason;
}
