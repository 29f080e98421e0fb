// `npm run test:pg`: the service and engine suites again, each server on a PostgreSQL database of its own
// (SVC_TEST_STORE=pg), on the server SVC_TEST_DATABASE_URL names (.ci/run sets it). Outside CI
// without that variable it says so and does nothing; under CI=true it fails instead.
import { spawnSync } from 'node:child_process';

if (!process.env.SVC_TEST_DATABASE_URL) {
  if (process.env.CI === 'true') {
    console.error('test:pg: under CI=true SVC_TEST_DATABASE_URL must be set (the suites run on PostgreSQL too)');
    process.exit(1);
  }
  console.log(
    'test:pg: SVC_TEST_DATABASE_URL is not set, so the PostgreSQL pass did not run (set it to a server, e.g. postgres://postgres@127.0.0.1:5432/postgres)',
  );
  process.exit(0);
}
const files = process.argv.slice(2);
const result = spawnSync(process.execPath, ['--import', 'tsx', '--test', '--test-concurrency=2', ...files], {
  stdio: 'inherit',
  env: { ...process.env, SVC_TEST_STORE: 'pg' },
});
process.exit(result.status ?? 1);
