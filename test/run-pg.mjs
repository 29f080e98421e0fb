// `npm run test:pg`: the service and engine suites again, each server on a PostgreSQL database of its own
// (SVC_TEST_STORE=pg), on the server SVC_TEST_DATABASE_URL names (.ci/run sets it). Outside CI
// without that variable it says so and does nothing; under CI=true it fails instead.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

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
// A file runs again here only when one of its servers follows SVC_TEST_STORE. The others (the
// engine's HTTP and rendering tests, the query plans of SQLite, the tests that open both stores
// themselves) would repeat exactly what the SQLite pass ran.
const FOLLOWS_STORE = [/\b(buildAsOwner|joinNode|testStore)\(/, /\bbuild\(t(?!, \{ store: 'sqlite' \})/];
// Files named pg*.test.ts test PostgreSQL alone, each server on a database it makes itself
// (SVC_DATABASE_URL), whatever SVC_TEST_STORE says: the SQLite pass has run them already.
const OWN_DATABASE = /(^|\/)pg[A-Z][^/]*\.test\.ts$/;
const files = [];
const repeated = [];
for (const file of process.argv.slice(2)) {
  const source = readFileSync(file, 'utf8');
  (!OWN_DATABASE.test(file) && FOLLOWS_STORE.some((re) => re.test(source)) ? files : repeated).push(file);
}
console.log(`test:pg: ${files.length} files on PostgreSQL; not repeated, as no server of theirs follows the store: ${repeated.join(' ')}`);
// Three files at a time, as in the SQLite pass: with two, the PostgreSQL pass kept only 1.5
// cores busy (its files wait on PostgreSQL and on child processes); three took it from 273 s to
// 247 s on the 2-core machine, PostgreSQL's own processes included. The timing files
// (test/timing/*.timing.ts, which assert a latency bound) run afterwards, one at a time, as in
// the SQLite pass: beside other files their p99 measured the machine's load, not svc.
const timing = files.filter((file) => file.endsWith('.timing.ts'));
const concurrent = files.filter((file) => !file.endsWith('.timing.ts'));
const env = { ...process.env, SVC_TEST_STORE: 'pg' };
for (const [group, concurrency] of [
  [concurrent, 3],
  [timing, 1],
]) {
  if (group.length === 0) continue;
  const result = spawnSync(process.execPath, ['--import', 'tsx', '--test', `--test-concurrency=${concurrency}`, ...group], {
    stdio: 'inherit',
    env,
  });
  if (result.status !== 0) process.exit(result.status ?? 1);
}
