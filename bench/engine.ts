// npm run bench:engine: the run engine fed by webhooks, with the built bundle.
// 1. Throughput: N webhooks for a three-step workflow (update_contact, send_email through
//    the outbox, add_tags); completed runs per second from the first to the last completion.
// 2. Keeping up: webhooks at a fixed rate, first with the engine off (an ingest-only
//    server), then on; the QUEUED backlog is sampled and webhook p99 compared.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import autocannon from 'autocannon';
import { prepareBaseline } from './baseline.js';
import { cpuMs, fixedRate, peakRssMb, runRequests, setUpRunWorkflow, startProcess, stop } from './lib.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const RUNS = Number(process.env.BENCH_RUNS ?? 20_000);
const RATE = Number(process.env.BENCH_RATE ?? 1000);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const PASSWORD = 'bench-password-123';

async function serve(env: NodeJS.ProcessEnv, checkout = root) {
  const svc = await startProcess(join(checkout, 'bin', 'svc'), ['serve', '--port', '0'], env, /svc listening on (\S+)/);
  return { svc, base: svc.match[1]! };
}

function counts(dbFile: string): Record<string, number> {
  const db = new Database(dbFile, { readonly: true });
  try {
    const rows = db.prepare('SELECT status, COUNT(*) AS n FROM workflow_runs GROUP BY status').all() as { status: string; n: number }[];
    return Object.fromEntries(rows.map((r) => [r.status, r.n]));
  } finally {
    db.close();
  }
}

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);

/**
 * Throughput of one build: RUNS runs queued by an ingest-only server on a fresh data folder,
 * then timed while a server with the engine on drains them.
 */
async function throughput(checkout: string): Promise<{ runsPerSecond: number; failed: number; rss: number; cpuUsPerRun: number }> {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-engine-'));
  const dbFile = join(dataDir, 'svc.db');
  const env = { ...process.env, SVC_DATA_DIR: dataDir, SVC_LOG_LEVEL: 'warn', SVC_WEBHOOK_RATE_LIMIT: '1000000' };
  try {
    execFileSync(join(checkout, 'bin', 'svc'), ['init', '--yes', '--plan', 'PRO', '--email', 'bench@example.com', '--password-stdin'], {
      env,
      input: PASSWORD,
      stdio: ['pipe', 'ignore', 'inherit'],
    });
    let { svc, base } = await serve({ ...env, SVC_ENGINE: 'false' }, checkout);
    const path = new URL(await setUpRunWorkflow(base, 'bench@example.com', PASSWORD)).pathname;
    await autocannon({ url: base + path, connections: 50, amount: RUNS, requests: runRequests(RUNS) });
    await stop(svc.child);
    ({ svc, base } = await serve(env, checkout));
    // The server's CPU time (all its threads) from the moment it listens to the last run done.
    const cpuBefore = cpuMs(svc.child.pid!);
    const started = Date.now();
    let done = 0;
    while (done < RUNS) {
      const c = counts(dbFile);
      done = (c.COMPLETED ?? 0) + (c.FAILED ?? 0);
      if (Date.now() - started > 120_000) throw new Error(`only ${done} of ${RUNS} runs done after 120 s: ${JSON.stringify(c)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const seconds = (Date.now() - started) / 1000;
    const cpuUsPerRun = Math.round(((cpuMs(svc.child.pid!) - cpuBefore) * 1000) / RUNS);
    const rss = peakRssMb(svc.child.pid!);
    await stop(svc.child);
    return { runsPerSecond: Math.round(RUNS / seconds), failed: counts(dbFile).FAILED ?? 0, rss, cpuUsPerRun };
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const baseline = prepareBaseline();
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-engine-'));
  const dbFile = join(dataDir, 'svc.db');
  const env = { ...process.env, SVC_DATA_DIR: dataDir, SVC_LOG_LEVEL: 'warn', SVC_WEBHOOK_RATE_LIMIT: '1000000' };
  try {
    // 1. throughput, this build and the baseline in alternating rounds
    const mine: Awaited<ReturnType<typeof throughput>>[] = [];
    const theirs: typeof mine = [];
    for (let round = 0; round < ROUNDS; round++) {
      mine.push(await throughput(root));
      if (baseline) theirs.push(await throughput(baseline.dir));
    }
    const show = (results: typeof mine) =>
      results.map((r) => `${r.runsPerSecond} runs/s, ${r.cpuUsPerRun} µs CPU a run (${r.failed} failed, peak RSS ${r.rss} MB)`).join('; ');
    console.log(
      `engine: ${RUNS} queued runs of 3 steps (update_contact, send_email via outbox, add_tags), ${process.env.SVC_WORKERS ?? 'default'} workers, drained from server start, ${ROUNDS} rounds`,
    );
    console.log(`  this build: ${show(mine)}   (target >= 4000)`);
    if (baseline) console.log(`  baseline ${baseline.label}: ${show(theirs)}`);

    execFileSync(join(root, 'bin', 'svc'), ['init', '--yes', '--plan', 'PRO', '--email', 'bench@example.com', '--password-stdin'], {
      env,
      input: PASSWORD,
      stdio: ['pipe', 'ignore', 'inherit'],
    });
    let { svc, base } = await serve({ ...env, SVC_ENGINE: 'false' });
    const path = new URL(await setUpRunWorkflow(base, 'bench@example.com', PASSWORD)).pathname;
    await stop(svc.child);

    // 2. keeping up, at a fixed webhook rate
    const measure = async (engine: boolean) => {
      ({ svc, base } = await serve({ ...env, SVC_ENGINE: engine ? 'true' : 'false' }));
      const load = runRequests(RATE * SECONDS);
      // Warm-up: connections, JIT, and every contact the load names is created.
      await fixedRate({ url: base + path, rate: RATE, seconds: 2, requests: load });
      let maxBacklog = 0;
      const sampler = setInterval(() => (maxBacklog = Math.max(maxBacklog, counts(dbFile).QUEUED ?? 0)), 250);
      const r = await fixedRate({ url: base + path, rate: RATE, seconds: SECONDS, requests: load });
      clearInterval(sampler);
      await new Promise((res) => setTimeout(res, 1000));
      const end = counts(dbFile).QUEUED ?? 0;
      await stop(svc.child);
      return { ...r, maxBacklog, endBacklog: end };
    };
    // Engine on first, while nothing is queued; the runs the engine-off pass leaves QUEUED
    // are simply left behind.
    const busy = await measure(true);
    const idle = await measure(false);
    console.log(`keeping up at ${RATE} webhooks/s for ${SECONDS} s:`);
    console.log(`  engine off: ${idle.rps} req/s, p50 ${idle.p50} ms, p99 ${idle.p99} ms, non-2xx ${idle.failed}`);
    console.log(
      `  engine on:  ${busy.rps} req/s, p50 ${busy.p50} ms, p99 ${busy.p99} ms, non-2xx ${busy.failed}; QUEUED backlog max ${busy.maxBacklog}, 1 s after the load ${busy.endBacklog}`,
    );
    console.log(`  p99 ratio on/off: ${(busy.p99 / Math.max(1, idle.p99)).toFixed(2)} (target <= 2)`);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
