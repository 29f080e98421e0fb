// npm run bench:cluster: webhook ingest and completed runs per second on single-node SQLite,
// one PostgreSQL node, and two PostgreSQL nodes sharing a Redis, in one run, with the built
// bundle as a user runs it. Each setup gets a fresh data folder or database and the same
// load: BENCH_RUNS webhooks of the engine benchmark's three-step workflow, sent as fast as
// the nodes take them (spread evenly over the nodes), every node running its engine.
// - ingest only: accepted webhooks per second into nodes with the engine off (the first
//   pass, which also creates a contact per webhook);
// - ingest: the same with every engine on (the second pass), first request to last answer;
// - completed: runs per second, from the first request until every run is COMPLETED;
// - drain: runs per second when the same number of runs were queued first (nodes with the
//   engine off) and the nodes then start with it on, so intake does not share the CPU.
// Everything shares this machine's cores: the figures measure overhead, not scaling.
// BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres) is the server on
// which a database per setup is created and dropped; BENCH_REDIS_URL the Redis.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import pg from 'pg';
import { runRequests, sendInOrder, setUpRunWorkflow, startProcess, stop } from './lib.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const svcBin = join(root, 'bin', 'svc');
const RUNS = Number(process.env.BENCH_RUNS ?? 10_000);
const PG_SERVER = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const REDIS = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const PASSWORD = 'bench-password-123';
const EMAIL = 'bench@example.com';
const TIMEOUT_MS = Number(process.env.BENCH_TIMEOUT_MS ?? 300_000);

interface Setup {
  name: string;
  nodes: number;
  store: 'sqlite' | 'pg';
}

interface Figures {
  /** Webhooks per second into nodes with the engine off. */
  ingestOnly: number;
  ingest: number;
  completed: number;
  drain: number;
  non2xx: number;
  failed: number;
}

interface Cluster {
  /** Environment of node i (its own data folder; the cluster's database, secrets and Redis). */
  env(i: number, engine: boolean): NodeJS.ProcessEnv;
  counts(): Promise<Record<string, number>>;
  drop(): Promise<void>;
}

async function prepare(setup: Setup): Promise<Cluster> {
  const folders = Array.from({ length: setup.nodes }, () => mkdtempSync(join(tmpdir(), 'svc-bench-cluster-')));
  const base = { ...process.env, SVC_LOG_LEVEL: 'warn', SVC_WEBHOOK_RATE_LIMIT: '1000000' };
  if (setup.store === 'sqlite') {
    const env = (_i: number, engine: boolean) => ({ ...base, SVC_DATA_DIR: folders[0]!, SVC_ENGINE: String(engine) });
    execFileSync(svcBin, ['init', '--yes', '--plan', 'PRO', '--email', EMAIL, '--password-stdin'], {
      env: env(0, false),
      input: PASSWORD,
      stdio: ['pipe', 'ignore', 'inherit'],
    });
    return {
      env,
      async counts() {
        const db = new Database(join(folders[0]!, 'svc.db'), { readonly: true });
        try {
          const rows = db.prepare('SELECT status, COUNT(*) AS n FROM workflow_runs GROUP BY status').all() as { status: string; n: number }[];
          return Object.fromEntries(rows.map((r) => [r.status, r.n]));
        } finally {
          db.close();
        }
      },
      async drop() {
        for (const f of folders) rmSync(f, { recursive: true, force: true });
      },
    };
  }
  const name = `svc_bench_cluster_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: PG_SERVER });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const url = new URL(PG_SERVER);
  url.pathname = `/${name}`;
  const secrets = { SVC_JWT_SECRET: randomBytes(32).toString('base64url'), SVC_ENCRYPTION_KEY: randomBytes(32).toString('base64url') };
  const prefix = `svc-bench-${randomBytes(4).toString('hex')}:`;
  const env = (i: number, engine: boolean) => ({
    ...base,
    ...secrets,
    SVC_DATA_DIR: folders[i]!,
    SVC_DATABASE_URL: url.href,
    SVC_ENGINE: String(engine),
    ...(setup.nodes > 1 ? { SVC_REDIS_URL: REDIS, SVC_REDIS_PREFIX: prefix } : {}),
  });
  execFileSync(svcBin, ['init', '--yes', '--plan', 'PRO', '--email', EMAIL, '--password-stdin'], {
    env: env(0, false),
    input: PASSWORD,
    stdio: ['pipe', 'ignore', 'inherit'],
  });
  const reader = new pg.Client({ connectionString: url.href });
  await reader.connect();
  return {
    env,
    async counts() {
      const { rows } = await reader.query<{ status: string; n: string }>('SELECT status, COUNT(*) AS n FROM workflow_runs GROUP BY status');
      return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
    },
    async drop() {
      await reader.end();
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.end();
      for (const f of folders) rmSync(f, { recursive: true, force: true });
    },
  };
}

async function startNodes(cluster: Cluster, nodes: number, engine: boolean) {
  const started = [];
  for (let i = 0; i < nodes; i++) {
    const svc = await startProcess(svcBin, ['serve', '--port', '0'], cluster.env(i, engine), /svc listening on (\S+)/);
    started.push({ child: svc.child, base: svc.match[1]! });
  }
  return started;
}

/**
 * Sends `count` webhooks spread evenly over the nodes at once, each node's share in order of
 * customer (runs of one contact seldom overlap, as with real senders); resolves with the
 * seconds it took and the answers that were not 2xx.
 */
async function send(bases: string[], path: string, count: number): Promise<{ seconds: number; non2xx: number }> {
  const started = Date.now();
  const share = Math.ceil(count / bases.length);
  // As many customers as webhooks: each node's share names its own customers, so the runs of
  // one contact never overlap (a node has up to 1,000 runs in flight), and the second pass
  // finds every contact the first created.
  const requests = runRequests(count, count);
  const results = await Promise.all(
    bases.map((base, i) =>
      sendInOrder({
        url: base + path,
        count: Math.min(share, count - i * share),
        concurrency: 32,
        requests: requests.slice(i * share, (i + 1) * share),
      }),
    ),
  );
  return { seconds: (Date.now() - started) / 1000, non2xx: results.reduce((n, r) => n + r.failed, 0) };
}

async function untilDone(cluster: Cluster, total: number, since: number): Promise<{ seconds: number; failed: number }> {
  for (;;) {
    const c = await cluster.counts();
    const done = (c.COMPLETED ?? 0) + (c.FAILED ?? 0);
    if (done >= total) return { seconds: (Date.now() - since) / 1000, failed: c.FAILED ?? 0 };
    if (Date.now() - since > TIMEOUT_MS) throw new Error(`only ${done} of ${total} runs done after ${TIMEOUT_MS / 1000} s: ${JSON.stringify(c)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function measure(setup: Setup): Promise<Figures> {
  const cluster = await prepare(setup);
  let figures: Figures;
  try {
    // Set up on an ingest-only node, then queue RUNS runs with the engine off: the drain.
    let nodes = await startNodes(cluster, setup.nodes, false);
    const path = new URL(await setUpRunWorkflow(nodes[0]!.base, EMAIL, PASSWORD)).pathname;
    const queued = await send(
      nodes.map((n) => n.base),
      path,
      RUNS,
    );
    for (const n of nodes) await stop(n.child);
    const drainStart = Date.now();
    nodes = await startNodes(cluster, setup.nodes, true);
    const drained = await untilDone(cluster, RUNS, drainStart);

    // Then the same load again with every engine on: ingest and completed runs together.
    const since = Date.now();
    const sent = await send(
      nodes.map((n) => n.base),
      path,
      RUNS,
    );
    const done = await untilDone(cluster, 2 * RUNS, since);
    for (const n of nodes) await stop(n.child);
    figures = {
      ingestOnly: Math.round(RUNS / queued.seconds),
      ingest: Math.round(RUNS / sent.seconds),
      completed: Math.round(RUNS / done.seconds),
      drain: Math.round(RUNS / drained.seconds),
      non2xx: queued.non2xx + sent.non2xx,
      failed: done.failed,
    };
  } catch (err) {
    if (process.env.BENCH_KEEP) console.error(`kept for inspection: ${cluster.env(0, false).SVC_DATA_DIR} ${cluster.env(0, false).SVC_DATABASE_URL ?? ''}`);
    else await cluster.drop();
    throw err;
  }
  await cluster.drop();
  return figures;
}

const ALL_SETUPS: Setup[] = [
  { name: 'SQLite, 1 node', nodes: 1, store: 'sqlite' },
  { name: 'PostgreSQL, 1 node', nodes: 1, store: 'pg' },
  { name: 'PostgreSQL, 2 nodes + Redis', nodes: 2, store: 'pg' },
];
// BENCH_SETUPS=1,3 measures only those (numbered from 1), e.g. while looking into one.
const only = process.env.BENCH_SETUPS?.split(',').map(Number);
const SETUPS = only ? ALL_SETUPS.filter((_, i) => only.includes(i + 1)) : ALL_SETUPS;

console.log(
  `bench:cluster: ${RUNS} webhooks per pass (3-step workflow; the first pass creates a contact per webhook, the second finds them), ${availableParallelism()} cores (${cpus()[0]?.model ?? '?'}), ${Math.round(totalmem() / 2 ** 30)} GiB; nodes, PostgreSQL, Redis and the load generator share them`,
);
const rows: (Setup & Figures)[] = [];
for (const setup of SETUPS) {
  const figures = await measure(setup);
  rows.push({ ...setup, ...figures });
  console.log(
    `  ${setup.name.padEnd(30)} ingest only ${String(figures.ingestOnly).padStart(6)} webhooks/s   with the engine ${String(figures.ingest).padStart(6)} webhooks/s   completed ${String(figures.completed).padStart(6)} runs/s   drain ${String(figures.drain).padStart(6)} runs/s   errors ${figures.non2xx + figures.failed}`,
  );
}
const two = rows.find((r) => r.store === 'pg' && r.nodes === 2);
if (two) console.log(`  two PostgreSQL nodes: ${two.completed} completed runs/s with ingest, ${two.drain} draining (target >= 1500, no error)`);
if (rows.some((r) => r.non2xx + r.failed > 0)) process.exitCode = 1;
