import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test, type TestContext } from 'node:test';
import { Redis } from 'ioredis';
import { lines, runCli, show, startServe, tempDir, type ServeProcess } from '../cli/helpers.js';
import { createTestDatabase, skipOutsideCIWithoutPostgres } from '../pg.js';
import { skipOutsideCIWithoutRedis, testRedisPrefix, testRedisServer } from '../redis.js';
import { slowService, type SlowService } from '../slowService.js';
import { smtpSink, type SinkMail } from '../smtpSink.js';

/**
 * Issue 12 (scale-out), proven with a real cluster: three `svc serve` processes, each with a
 * data folder of its own, on one PostgreSQL database and one Redis, given the same secrets
 * through the environment. Webhooks and API calls are spread over the nodes; messages go to a
 * real SMTP server in this process, which counts them per run (the subject names the run).
 *
 * The per-address webhook limit (120 a minute, counted in Redis across the nodes) would
 * refuse the other cases' traffic, which all comes from 127.0.0.1. This process acts as the
 * nodes' reverse proxy instead (SVC_TRUST_PROXY=127.0.0.1), so each webhook names its
 * sender's address in X-Forwarded-For: the load cases give every request an address of its
 * own, and the limit case keeps one address and the default limit.
 *
 * One cluster serves every case; the last case kills one of its nodes. With
 * SVC_TEST_CLUSTER_LOG_DIR set, each node's output is written there at the end.
 */

const OWNER = 'cluster-owner@example.com';
/**
 * Short leases, so that the runs of a killed node are taken over within seconds (the product's
 * default is 30). Not shorter: a live node whose renewals (every third of the lease) stall
 * for longer than two thirds of it loses its runs to the others, as designed, and a message
 * being sent then fails rather than go twice. On a 2-core CI machine running other test files
 * (browsers among them) beside the three nodes and PostgreSQL, with no idle CPU, 3 s leases
 * lost one run of case 1 that way (the twenty-seventh session on issue 9).
 */
const LEASE_SECONDS = 6;

interface Answer {
  status: number;
  headers: Headers;
  body: any;
  text: string;
}

interface Node {
  name: string;
  url: string;
  serve: ServeProcess;
}

/** Clean-ups of the suite, run last first by its `after` hook (a suite context has no `after`). */
const cleanups: (() => unknown)[] = [];
const scope = { after: (fn: () => unknown) => void cleanups.push(fn) };
/** For the helpers that only ever call `t.after`. */
const scopeAsTest = scope as unknown as TestContext;

async function call(
  base: string,
  method: string,
  path: string,
  opts: { token?: string; body?: unknown; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(base + path, { method, headers, ...(opts.body !== undefined ? { body: JSON.stringify(opts.body) } : {}) });
  const text = await res.text();
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  return { status: res.status, headers: res.headers, body, text };
}

let addressCounter = 0;
/** A sender address no other request of this file uses (10.0.0.0/8, one per request). */
function freshAddress(): string {
  const n = ++addressCounter;
  return `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;
}

/** A run that has reached its end. */
const finished = (r: { status: string }) => r.status === 'COMPLETED' || r.status === 'FAILED';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Prints a measured figure in the test's report and on the console. */
/**
 * Asks each node until `sees` answers true (at most every 50 ms, for `limitMs` in all); answers
 * the ms after which each node did (a node missing never did).
 */
async function untilEach<N extends { name: string }>(nodes: N[], limitMs: number, sees: (node: N) => Promise<boolean>): Promise<Map<string, number>> {
  const t0 = performance.now();
  const after = new Map<string, number>();
  while (after.size < nodes.length && performance.now() - t0 < limitMs) {
    await Promise.all(
      nodes
        .filter((n) => !after.has(n.name))
        .map(async (node) => {
          if (await sees(node)) after.set(node.name, performance.now() - t0);
        }),
    );
    if (after.size < nodes.length) await sleep(50);
  }
  return after;
}

function report(t: TestContext, message: string): void {
  t.diagnostic(message);
  console.log(`[cluster] ${message}`);
}

/** The run ids named by the messages the sink received (subject "run <id>"), with their counts. */
function messagesPerRun(received: SinkMail[]): Map<number, number> {
  const counts = new Map<number, number>();
  for (const mail of received) {
    const m = /^Subject: run (\d+)\r?$/m.exec(mail.raw);
    assert.ok(m, `a message without a run in its subject:\n${mail.raw.slice(0, 500)}`);
    const id = Number(m[1]);
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

describe('three svc serve nodes on one PostgreSQL and one Redis', { skip: skipOutsideCIWithoutPostgres() || skipOutsideCIWithoutRedis() }, () => {
  let nodes: Node[] = [];
  let token = '';
  let templateId = 0;
  let sink: { port: number; received: SinkMail[] };
  let slow: SlowService;
  const suiteStarted = Date.now();

  const api = (node: Node, method: string, path: string, body?: unknown) => call(node.url, method, path, { token, ...(body !== undefined ? { body } : {}) });

  /** A webhook from `from` (a fresh address unless given) to one node. */
  const hook = (node: Node, path: string, body: unknown, opts: { from?: string; idempotencyKey?: string } = {}) =>
    call(node.url, 'POST', path, {
      body,
      headers: { 'x-forwarded-for': opts.from ?? freshAddress(), ...(opts.idempotencyKey ? { 'idempotency-key': opts.idempotencyKey } : {}) },
    });

  /** An ACTIVE webhook workflow created through one node: its id and webhook path (the same on every node). */
  async function workflow(node: Node, name: string, steps: unknown[], webhook: Record<string, unknown> = {}): Promise<{ id: number; path: string }> {
    const wf = await api(node, 'POST', '/workflows', {
      name,
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps,
      webhook: { lookup: 'email', path: 'email', createIfNotFound: true, ...webhook },
    });
    assert.equal(wf.status, 201, wf.text);
    return { id: wf.body.id, path: new URL(wf.body.webhook.url).pathname };
  }

  /** The nodes' log lines at or above a pino level (50: errors), for assertion messages. */
  const nodeLog = (level = 50): string =>
    nodes
      .flatMap((n) =>
        lines(n.serve.stdout() + n.serve.stderr())
          .filter((l) => {
            try {
              return (JSON.parse(l) as { level?: number }).level! >= level;
            } catch {
              return false;
            }
          })
          .slice(0, 20)
          .map((l) => `node ${n.name}: ${l.slice(0, 600)}`),
      )
      .join('\n') || '(nothing logged)';

  /** Asserts that every answer is a 202, with the nodes' errors when one is not. */
  function all202(answers: Answer[]): void {
    const others = answers.filter((a) => a.status !== 202);
    assert.deepEqual(
      others.map((a) => `${a.status} ${a.text}`),
      [],
      `${others.length} of ${answers.length} webhooks were not accepted; the nodes logged:\n${nodeLog()}`,
    );
  }

  /** What the runs are, for assertion messages: counts by status and the failed steps' errors. */
  function summary(runs: any[]): string {
    const statuses: Record<string, number> = {};
    for (const r of runs) statuses[r.status] = (statuses[r.status] ?? 0) + 1;
    const failures = runs
      .filter((r) => r.status === 'FAILED')
      .slice(0, 10)
      .map((r) => {
        const step = r.steps.find((st: any) => st.status === 'FAILED');
        return `run ${r.runId}: step ${step?.index} ${step?.type}: ${step?.error}`;
      });
    return `${runs.length} runs ${JSON.stringify(statuses)}${failures.length ? `\n${failures.join('\n')}` : ''}`;
  }

  /** Every run of a workflow, read through one node, following the cursor. */
  async function runsOf(node: Node, workflowId: number): Promise<any[]> {
    const runs: any[] = [];
    let cursor: string | null = null;
    do {
      const page = await api(node, 'GET', `/runs?workflowId=${workflowId}&limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      assert.equal(page.status, 200, page.text);
      runs.push(...page.body.data);
      cursor = page.body.nextCursor;
    } while (cursor);
    return runs;
  }

  /** Waits until `done` holds for the workflow's runs, or fails with what they are. */
  async function waitForRuns(node: Node, workflowId: number, what: string, done: (runs: any[]) => boolean, timeoutMs = 20_000): Promise<any[]> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const runs = await runsOf(node, workflowId);
      if (done(runs)) return runs;
      if (Date.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}: ${summary(runs)}\nthe nodes logged:\n${nodeLog(40)}`);
      await sleep(250);
    }
  }

  before(
    async () => {
      sink = await smtpSink(scopeAsTest);
      // A local API the load case calls before each message: slow enough that a killed node
      // has runs in flight, and it counts the calls of each run (?key=<run id>).
      slow = await slowService(scopeAsTest, 600);
      const databaseUrl = await createTestDatabase(scope);
      const redisUrl = testRedisServer()!;
      const redisPrefix = testRedisPrefix();
      scope.after(async () => {
        // The limit counters expire within a minute anyway; leave nothing behind.
        const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
        try {
          await redis.connect();
          const keys = await redis.keys(`${redisPrefix}*`);
          if (keys.length) await redis.del(...keys);
        } finally {
          redis.disconnect();
        }
      });
      // The same two secrets on every node (and none of the generated ones used).
      const secrets = { SVC_JWT_SECRET: randomBytes(32).toString('base64url'), SVC_ENCRYPTION_KEY: randomBytes(32).toString('base64url') };
      const root = tempDir(scope, 'svc-cluster-');
      const dirs = ['a', 'b', 'c'].map((n) => join(root, `node-${n}`));

      const init = await runCli(dirs[0]!, ['--database-url', databaseUrl, 'init', '--yes', '--plan', 'PRO', '--email', OWNER, '--json'], { env: secrets });
      assert.equal(init.code, 0, show(init));
      const { password } = init.json() as { password: string };
      // The other nodes start on folders that do not exist yet: a node joining an initialised
      // database with the cluster's secrets in its environment needs nothing more.

      const env = {
        ...secrets,
        SVC_DATABASE_URL: databaseUrl,
        SVC_REDIS_URL: redisUrl,
        SVC_REDIS_PREFIX: redisPrefix,
        SVC_WORKERS: '1',
        SVC_RUN_LEASE_SECONDS: String(LEASE_SECONDS),
        SVC_TRUST_PROXY: '127.0.0.1',
        SVC_HTTP_ALLOWED_HOSTS: `127.0.0.1:${sink.port},${slow.host}`,
        SVC_LOG_LEVEL: 'warn',
      };
      const serves = await Promise.all(dirs.map((dir) => startServe(scope, dir, ['--port', '0'], { env, timeoutMs: 90_000 })));
      nodes = serves.map((serve, i) => ({ name: 'ABC'[i]!, url: serve.url, serve }));
      // Killed (if still running) and waited for before the database is dropped.
      scope.after(() => {
        const logDir = process.env.SVC_TEST_CLUSTER_LOG_DIR;
        if (logDir) for (const n of nodes) writeFileSync(join(logDir, `node-${n.name}.log`), n.serve.stdout() + n.serve.stderr());
      });
      scope.after(() =>
        Promise.all(
          nodes.map(async (n) => {
            if (n.serve.child.exitCode === null && n.serve.child.signalCode === null) await n.serve.stop('SIGKILL');
          }),
        ),
      );

      const login = await call(nodes[0]!.url, 'POST', '/auth/login', { body: { email: OWNER, password } });
      assert.equal(login.status, 200, login.text);
      token = login.body.token;
      // The access token signed by node A is good on B and C: the same secret.
      for (const node of nodes) assert.equal((await api(node, 'GET', '/auth/me')).status, 200, `the token is refused by node ${node.name}`);
      const channels = await api(nodes[1]!, 'PUT', '/settings/channels', {
        EMAIL: { provider: 'smtp', settings: { host: '127.0.0.1', port: sink.port, secure: false, from: 'cluster@example.com' } },
      });
      assert.equal(channels.status, 200, channels.text);
      const template = await api(nodes[2]!, 'POST', '/templates', {
        name: 'per run',
        channel: 'EMAIL',
        content: { subject: 'run {{ run.id }}', text: 'Hello {{ contact.email }}, from workflow {{ run.workflowId }}' },
      });
      assert.equal(template.status, 201, template.text);
      templateId = template.body.id;
    },
    { timeout: 180_000 },
  );

  after(async () => {
    let failure: unknown;
    for (const fn of cleanups.reverse()) {
      try {
        await fn();
      } catch (err) {
        failure ??= err;
      }
    }
    console.log(`[cluster] wall time of the suite: ${((Date.now() - suiteStarted) / 1000).toFixed(1)} s`);
    if (failure) throw failure;
  });

  test('1. 150 webhooks round-robin over the three nodes: 150 runs, each COMPLETED once, each message delivered once', { timeout: 90_000 }, async (t) => {
    const wf = await workflow(nodes[0]!, 'spread', [
      { type: 'send_email', templateId },
      { type: 'add_tags', tags: ['spread'] },
    ]);
    const N = 150;
    const answers: Answer[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: 15 }, async () => {
        for (let i = next++; i < N; i = next++) answers[i] = await hook(nodes[i % 3]!, wf.path, { email: `spread-${i}@example.com`, order: i });
      }),
    );
    all202(answers);
    const runIds = answers.map((a) => a.body.runId as number);
    assert.equal(new Set(runIds).size, N, 'every webhook started a run of its own');

    const started = Date.now();
    const runs = await waitForRuns(nodes[1]!, wf.id, `${N} finished runs`, (rs) => rs.length >= N && rs.every(finished), 20_000);
    assert.equal(runs.length, N, `exactly ${N} runs`);
    assert.deepEqual(new Set(runs.map((r) => r.runId)), new Set(runIds));
    assert.ok(
      runs.every((r) => r.status === 'COMPLETED'),
      `every run COMPLETED: ${summary(runs)}\nthe nodes logged:\n${nodeLog(40)}`,
    );

    const perRun = messagesPerRun(sink.received);
    const mine = runIds.map((id) => perRun.get(id) ?? 0);
    assert.deepEqual(
      runIds.filter((_, i) => mine[i] !== 1),
      [],
      'runs whose message was not delivered exactly once',
    );
    report(
      t,
      `case 1: ${N} webhooks (${N / 3} per node) -> ${runs.length} runs, all COMPLETED ${((Date.now() - started) / 1000).toFixed(1)} s after the last answer, ${mine.reduce((a, b) => a + b, 0)} messages, one per run`,
    );
  });

  test('1b. 240 runs adding one tag, executed on the three nodes at once: all COMPLETED', { timeout: 60_000 }, async (t) => {
    // Not one of the issue's cases: what case 1 and case 7 hit now and then, made likely, on
    // contacts that exist already (no contact is created by the webhooks). Every run's commit
    // adds the tag to its own contact, and so updates the one counter row of the tag (tag_counts).
    const N = 240;
    const imported = await fetch(`${nodes[1]!.url}/contacts/import?mode=create`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/x-ndjson' },
      body: Array.from({ length: N }, (_, i) => JSON.stringify({ email: `hot-${i}@example.com` })).join('\n'),
    });
    const job = (await imported.json()) as { status: string; created: number };
    assert.equal(imported.status, 200, JSON.stringify(job));
    assert.equal(job.created, N, JSON.stringify(job));
    const wf = await workflow(nodes[2]!, 'hot tag', [{ type: 'add_tags', tags: ['hot'] }], { createIfNotFound: false });
    const answers: Answer[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: 24 }, async () => {
        for (let i = next++; i < N; i = next++) answers[i] = await hook(nodes[i % 3]!, wf.path, { email: `hot-${i}@example.com` });
      }),
    );
    all202(answers);
    const started = Date.now();
    const runs = await waitForRuns(nodes[0]!, wf.id, `${N} finished runs`, (rs) => rs.length >= N && rs.every(finished), 15_000);
    assert.ok(
      runs.every((r) => r.status === 'COMPLETED'),
      `every run COMPLETED: ${summary(runs)}\nthe nodes logged:\n${nodeLog(40)}`,
    );
    const tookMs = Date.now() - started;
    report(t, `case 1b: ${N} runs tagging existing contacts -> all COMPLETED ${(tookMs / 1000).toFixed(1)} s after the last answer`);
    // About 1 s here when nothing holds them up; a lock cycle costs a second per try.
    assert.ok(tookMs < 10_000, `${N} one-step runs took ${tookMs} ms to finish on three nodes; the nodes logged:\n${nodeLog(40)}`);
  });

  test('1c. 240 webhooks for new contacts on the three nodes at once: all 202 (each creates its contact)', { timeout: 60_000 }, async (t) => {
    // Not one of the issue's cases either: the burst of contact creations case 1 makes, larger.
    const wf = await workflow(nodes[0]!, 'new contacts', [{ type: 'update_contact', set: { 'attributes.seen': 'yes' } }]);
    const N = 240;
    const answers: Answer[] = [];
    let next = 0;
    const started = Date.now();
    await Promise.all(
      Array.from({ length: 24 }, async () => {
        for (let i = next++; i < N; i = next++) answers[i] = await hook(nodes[i % 3]!, wf.path, { email: `burst-${i}@example.com` });
      }),
    );
    all202(answers);
    report(t, `case 1c: ${N} webhooks for new contacts, 24 at a time over A/B/C -> all 202 in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  });

  test('2. 20 concurrent create-on-miss webhooks for one new email over the three nodes: all 202, 20 runs, one contact', { timeout: 60_000 }, async (t) => {
    const wf = await workflow(nodes[1]!, 'create on miss', [{ type: 'add_tags', tags: ['welcomed'] }], {
      defaults: { firstName: 'Ada', attributes: { source: 'cluster' }, tags: ['lead'] },
    });
    const email = 'newcomer@example.com';
    assert.equal((await api(nodes[0]!, 'GET', `/contacts?email=${email}`)).body.data.length, 0, 'the contact does not exist yet');
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => hook(nodes[i % 3]!, wf.path, { email: i % 2 ? email.toUpperCase() : email, n: i })));
    all202(answers);
    const contactIds = new Set(answers.map((a) => a.body.contactId));
    assert.equal(contactIds.size, 1, `all 20 name one contact: ${[...contactIds].join(', ')}`);

    const runs = await waitForRuns(nodes[2]!, wf.id, '20 finished runs', (rs) => rs.length >= 20 && rs.every(finished));
    assert.equal(runs.length, 20);
    assert.ok(
      runs.every((r) => r.status === 'COMPLETED'),
      `every run COMPLETED: ${summary(runs)}\nthe nodes logged:\n${nodeLog(40)}`,
    );
    assert.deepEqual(new Set(runs.map((r) => r.contactId)), contactIds);
    const found = await api(nodes[0]!, 'GET', `/contacts?email=${email}`);
    assert.equal(found.status, 200, found.text);
    assert.equal(found.body.data.length, 1, found.text);
    const contact = found.body.data[0];
    assert.equal(contact.id, [...contactIds][0]);
    assert.equal(contact.firstName, 'Ada', 'created with the workflow defaults');
    assert.deepEqual(contact.attributes, { source: 'cluster' });
    assert.deepEqual([...contact.tags].sort(), ['lead', 'welcomed']);
    const search = await api(nodes[1]!, 'GET', '/contacts?q=newcomer');
    assert.equal(search.body.data.length, 1, search.text);
    report(t, `case 2: 20 concurrent requests (7/7/6 over A/B/C) -> 20 x 202, ${runs.length} runs, 1 contact (id ${contact.id})`);
  });

  test('3. an Idempotency-Key repeated on another node replays the first answer; sent to all three at once, one run', { timeout: 60_000 }, async (t) => {
    const wf = await workflow(nodes[2]!, 'idempotent', [{ type: 'add_tags', tags: ['once'] }]);
    const body = { email: 'idem@example.com', order: 'A-1' };
    const first = await hook(nodes[0]!, wf.path, body, { idempotencyKey: 'order-A-1' });
    assert.equal(first.status, 202, first.text);
    assert.equal(first.headers.get('idempotent-replayed'), null);
    for (const node of [nodes[1]!, nodes[2]!, nodes[0]!]) {
      const again = await hook(node, wf.path, body, { idempotencyKey: 'order-A-1' });
      assert.equal(again.status, first.status, `node ${node.name}: ${again.text}`);
      assert.deepEqual(again.body, first.body, `node ${node.name} replays the first answer`);
      assert.equal(again.headers.get('idempotent-replayed'), 'true', `node ${node.name}`);
    }
    assert.equal((await runsOf(nodes[1]!, wf.id)).length, 1, 'one run for the repeated key');

    // The same new key at the same moment on the three nodes (and a new contact to create).
    const concurrent = await Promise.all(
      nodes.map((node) => hook(node, wf.path, { email: 'idem-2@example.com', order: 'B-2' }, { idempotencyKey: 'order-B-2' })),
    );
    all202(concurrent);
    assert.equal(new Set(concurrent.map((a) => a.text)).size, 1, `one answer for one key: ${concurrent.map((a) => a.text).join(' ')}`);
    assert.equal(concurrent.filter((a) => a.headers.get('idempotent-replayed') === 'true').length, 2, 'two of the three are replays');
    const runs = await runsOf(nodes[0]!, wf.id);
    assert.equal(runs.length, 2, `one run per key: ${JSON.stringify(runs.map((r) => r.runId))}`);
    report(t, `case 3: key repeated on B, C and A -> the same 202 body (run ${first.body.runId}); one key on three nodes at once -> 1 run, 2 replays`);
  });

  test('4. the 121st webhook request from one address across the nodes is 429 (default limit, counted in Redis)', { timeout: 60_000 }, async (t) => {
    const wf = await workflow(nodes[0]!, 'limited', [{ type: 'add_tags', tags: ['limited'] }]);
    const from = '203.0.113.4';
    const answers: Answer[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: 12 }, async () => {
        for (let i = next++; i < 120; i = next++) answers[i] = await hook(nodes[i % 3]!, wf.path, { email: `limited-${i % 10}@example.com`, n: i }, { from });
      }),
    );
    all202(answers);
    for (const a of answers) assert.equal(a.headers.get('x-ratelimit-limit'), '120', 'the default limit');
    // Each node saw 40 of them: counted per node, none would be down to 0 left.
    const remaining = answers.map((a) => Number(a.headers.get('x-ratelimit-remaining')));
    assert.equal(Math.min(...remaining), 0, `the 120th left none: ${remaining.join(',')}`);

    const over: Answer[] = [];
    for (const node of nodes) over.push(await hook(node, wf.path, { email: 'limited-0@example.com', n: 120 + over.length }, { from }));
    for (const [i, a] of over.entries()) {
      assert.equal(a.status, 429, `request ${121 + i} (node ${nodes[i]!.name}): ${a.text}`);
      assert.equal(a.body.code, 'rate_limited');
      assert.ok(Number(a.headers.get('retry-after')) > 0, 'with Retry-After');
    }
    // Another address is not affected, on any node.
    for (const node of nodes) assert.equal((await hook(node, wf.path, { email: 'limited-0@example.com' }, { from: '203.0.113.5' })).status, 202);
    const runs = await runsOf(nodes[1]!, wf.id);
    assert.equal(runs.length, 123, 'no run for a refused request');
    report(t, `case 4: 120 requests from ${from} over A/B/C -> 120 x 202; requests 121-123 (on A, B, C) -> 429`);
  });

  test('5. an API key revoked through one node is refused by the other two within 10 s', { timeout: 90_000 }, async (t) => {
    const figures: number[] = [];
    for (let round = 0; round < 3; round++) {
      const revoker = nodes[round]!;
      const others = nodes.filter((n) => n !== revoker);
      const minted = await api(others[0]!, 'POST', '/api-keys', { name: `revocable ${round}`, role: 'VIEWER' });
      assert.equal(minted.status, 201, minted.text);
      const key = minted.body.key as string;
      for (const node of nodes) assert.equal((await call(node.url, 'GET', '/auth/me', { token: key })).status, 200, `the new key works on ${node.name}`);

      const revoked = await api(revoker, 'DELETE', `/api-keys/${minted.body.id}`);
      assert.equal(revoked.status, 204, revoked.text);
      const refusedAfter = await untilEach(others, 10_000, async (node) => {
        const me = await call(node.url, 'GET', '/auth/me', { token: key });
        if (me.status === 401) return true;
        assert.equal(me.status, 200, me.text);
        return false;
      });
      for (const node of others) {
        const ms = refusedAfter.get(node.name);
        assert.ok(ms !== undefined && ms < 10_000, `round ${round}: node ${node.name} still accepted the key revoked through ${revoker.name} 10 s later`);
        figures.push(ms);
        const me = await call(node.url, 'GET', '/auth/me', { token: key });
        assert.equal(me.status, 401, 'and goes on refusing it');
        assert.equal(me.body.code, 'api_key_revoked', me.text);
      }
    }
    const worst = Math.max(...figures);
    assert.ok(worst < 10_000);
    report(
      t,
      `case 5: revocation seen by the other nodes after ${figures.map((ms) => ms.toFixed(0)).join(', ')} ms (3 rounds x 2 nodes); worst case ${worst.toFixed(0)} ms (limit 10 s)`,
    );
  });

  test('6. a workflow paused through one node answers 404 on the other two within 1 s', { timeout: 90_000 }, async (t) => {
    const wf = await workflow(nodes[0]!, 'pausable', [{ type: 'add_tags', tags: ['pausable'] }]);
    const figures: number[] = [];
    let lateAccepted = 0;
    for (let round = 0; round < 3; round++) {
      const pauser = nodes[round]!;
      const others = nodes.filter((n) => n !== pauser);
      // Every node has just accepted a webhook of this workflow (and holds it in its cache).
      for (const node of nodes) {
        const warm = await hook(node, wf.path, { email: 'pause@example.com', round });
        assert.equal(warm.status, 202, `round ${round}, node ${node.name}: ${warm.text}`);
      }
      const paused = await api(pauser, 'PATCH', `/workflows/${wf.id}`, { status: 'PAUSED' });
      assert.equal(paused.status, 200, paused.text);
      assert.equal(paused.body.status, 'PAUSED');
      const refusedAfter = await untilEach(others, 5_000, async (node) => {
        const res = await hook(node, wf.path, { email: 'pause@example.com', round });
        if (res.status === 404) {
          assert.equal(res.body.code, 'webhook_not_found', res.text);
          return true;
        }
        assert.equal(res.status, 202, res.text);
        lateAccepted++;
        return false;
      });
      for (const node of others) {
        const ms = refusedAfter.get(node.name);
        assert.ok(ms !== undefined && ms < 1_000, `round ${round}: node ${node.name} answered 404 only after ${ms?.toFixed(0) ?? 'more than 5000'} ms`);
        figures.push(ms);
        assert.equal((await hook(node, wf.path, { email: 'pause@example.com' })).status, 404, 'and goes on answering 404');
      }
      const resumed = await api(others[0]!, 'PATCH', `/workflows/${wf.id}`, { status: 'ACTIVE' });
      assert.equal(resumed.status, 200, resumed.text);
    }
    const worst = Math.max(...figures);
    report(
      t,
      `case 6: pause seen by the other nodes after ${figures.map((ms) => ms.toFixed(0)).join(', ')} ms (3 rounds x 2 nodes); worst case ${worst.toFixed(0)} ms (limit 1 s); webhooks accepted after the pause was answered: ${lateAccepted}`,
    );
  });

  test('7. kill -9 of one node under load: every run answered 202 finishes, no message is sent twice', { timeout: 120_000 }, async (t) => {
    // A slow outside call first (600 ms, at-least-once: README "Shutdown"), then the message
    // (at most once): the killed node holds runs in flight, mostly inside the slow call.
    const wf = await workflow(nodes[1]!, 'under load', [
      { type: 'http_request', method: 'POST', url: `${slow.url}?key={{ run.id }}` },
      { type: 'send_email', templateId },
      { type: 'add_tags', tags: ['loaded'] },
    ]);
    const victim = nodes[2]!;
    let live = [...nodes];
    const answered = new Set<number>();
    const otherAnswers: string[] = [];
    let unanswered = 0;
    let sent = 0;
    let stop = false;
    const sender = async () => {
      while (!stop) {
        const i = sent++;
        const node = live[i % live.length]!;
        try {
          const res = await hook(node, wf.path, { email: `load-${i}@example.com`, seq: i });
          if (res.status === 202) answered.add(res.body.runId);
          else otherAnswers.push(`node ${node.name}: ${res.status} ${res.text}`);
        } catch {
          unanswered++; // no answer: the connection died with the node
        }
      }
    };
    const senders = Array.from({ length: 8 }, sender);
    // Kill once 90 webhooks were answered and runs are inside their slow call (but send for at
    // most 5 s more waiting for that: runs the nodes are slow to start must not grow the load).
    const deadline = Date.now() + 20_000;
    while (answered.size < 90 && Date.now() < deadline) await sleep(20);
    const inFlightBy = Date.now() + 5_000;
    while (slow.inProgress() < 6 && Date.now() < inFlightBy) await sleep(20);
    assert.ok(answered.size >= 90, `only ${answered.size} webhooks answered 202 in 20 s; the nodes logged:\n${nodeLog()}`);
    const inFlightAtKill = slow.inProgress();
    const answeredAtKill = answered.size;
    victim.serve.child.kill('SIGKILL');
    live = nodes.filter((n) => n !== victim);
    const killedAt = Date.now();
    await new Promise((r) => victim.serve.child.once('exit', r));
    while (Date.now() - killedAt < 1_500) await sleep(50);
    stop = true;
    await Promise.all(senders);
    assert.deepEqual(otherAnswers, [], `every request that was answered was accepted; the nodes logged:\n${nodeLog()}`);
    assert.ok(answered.size > answeredAtKill, 'the surviving nodes went on accepting');

    // Every run of the workflow (also those whose answer the kill cut off) reaches its end.
    const runs = await waitForRuns(
      live[0]!,
      wf.id,
      'every run finished',
      (rs) => [...answered].every((id) => rs.some((r) => r.runId === id)) && rs.every(finished),
      30_000,
    );
    const settledMs = Date.now() - killedAt;
    const byId = new Map(runs.map((r) => [r.runId as number, r]));
    const lost = [...answered].filter((id) => !byId.has(id));
    assert.deepEqual(lost, [], `${lost.length} of ${answered.size} runs answered 202 were lost`);

    const perRun = messagesPerRun(sink.received);
    const twice = runs.filter((r) => (perRun.get(r.runId) ?? 0) > 1).map((r) => `run ${r.runId}: ${perRun.get(r.runId)} messages`);
    assert.deepEqual(twice, [], 'no message is sent twice');
    // At most once (README "Execution"): a message whose send may have happened when the
    // node died (its attempt left SENDING) is not sent again, and its step fails saying so,
    // as does its attempt.
    // Every other run COMPLETES with its message delivered exactly once.
    const cut: number[] = [];
    const problems: string[] = [];
    for (const r of runs) {
      const messages = perRun.get(r.runId) ?? 0;
      if (r.status === 'COMPLETED') {
        if (messages !== 1) problems.push(`run ${r.runId} COMPLETED with ${messages} messages`);
        continue;
      }
      const failedStep = r.steps.find((s: any) => s.status === 'FAILED');
      const attempts = await api(live[0]!, 'GET', `/messages/delivery-attempts?runId=${r.runId}`);
      const cutOff =
        attempts.body.data.length === 1 &&
        attempts.body.data.every((a: any) => a.status === 'FAILED' && /stopped while this message was being sent/.test(a.error));
      if (failedStep?.type === 'send_email' && /stopped while this message was being sent/.test(failedStep.error) && cutOff) {
        cut.push(r.runId);
        continue;
      }
      problems.push(
        `run ${r.runId} (answered 202: ${answered.has(r.runId)}) ${r.status}, ${messages} message(s) at the sink, ` +
          `${slow.calls.get(String(r.runId)) ?? 0} slow call(s); node C killed at ${new Date(killedAt).toISOString()}\n` +
          `  run: ${JSON.stringify({ ...r, trigger: undefined })}\n  attempts: ${JSON.stringify(attempts.body.data.map((a: any) => ({ ...a, rendered: undefined })))}`,
      );
    }
    // What the live nodes said of runs taken from them (a node whose renewals stall past the
    // lease loses its runs to the others while it is still running them).
    const takeoverLines = live.map((n) => lines(n.serve.stdout() + n.serve.stderr()).filter((l) => /taken over/.test(l)));
    const takeovers = live.map((n, i) => `${n.name}: ${takeoverLines[i]!.slice(0, 5).join(' | ') || 'none'}`);
    const takenFromLive = new Set(takeoverLines.flat().flatMap((l) => (JSON.parse(l) as { runIds?: number[] }).runIds ?? []));
    assert.deepEqual(
      problems,
      [],
      `runs that neither COMPLETED with one message nor failed at most once because of the kill:\n${problems.join('\n')}\ntake-over warnings of the live nodes: ${takeovers.join('; ')}`,
    );
    // The outside call is at least once (README "Shutdown"): a run taken over before its call's
    // step was committed makes the call again, whether or not the first one was answered.
    const calledTwice = runs.filter((r) => (slow.calls.get(String(r.runId)) ?? 0) === 2).length;
    for (const r of runs) {
      const calls = slow.calls.get(String(r.runId)) ?? 0;
      assert.ok(calls === 1 || calls === 2, `run ${r.runId}: ${calls} calls of the slow service`);
    }
    const completed = runs.filter((r) => r.status === 'COMPLETED').length;
    report(
      t,
      `case 7: ${sent} webhooks sent, ${answered.size} answered 202 (${answeredAtKill} before the kill), ${unanswered} cut off by the kill; ` +
        `${runs.length} runs: ${completed} COMPLETED with one message each, ${cut.length} FAILED at most once (message left SENDING by the kill; ` +
        `of which ${cut.filter((id) => perRun.has(id)).length} had reached the SMTP server, once); ` +
        `${inFlightAtKill} slow calls in flight at the kill, ${calledTwice} runs called it twice; all finished ${(settledMs / 1000).toFixed(1)} s after the kill (lease ${LEASE_SECONDS} s); ` +
        `the live nodes warned ${takeoverLines.flat().length} times of runs taken from them (${takenFromLive.size} run ids named)`,
    );
  });
});
