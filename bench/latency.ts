// npm run bench:latency [runs] [ms]: runs whose one step waits on the outside world.
// Webhook-started runs of a workflow with one http_request step to a local service that
// answers after `ms` milliseconds; the server (the built bundle) runs with its defaults,
// except that one workspace may use all of the node's run slots (SVC_WORKSPACE_CONCURRENCY
// = SVC_RUN_CONCURRENCY = 1000), since all the runs here are of one workspace.
// Prints runs/s from the first call to the last answer, the most calls the service saw at
// once, the server's peak RSS and its CPU time per run.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import autocannon from 'autocannon';
import { cpuMs, json, peakRssMb, rssMb, startProcess, stop } from './lib.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const RUNS = Number(process.argv[2] ?? process.env.BENCH_RUNS ?? 5_000);
const DELAY_MS = Number(process.argv[3] ?? process.env.BENCH_DELAY_MS ?? 200);
const PASSWORD = 'bench-password-123';

if (!Number.isInteger(RUNS) || RUNS < 1 || !Number.isFinite(DELAY_MS) || DELAY_MS < 0) {
  console.error('usage: npm run bench:latency [runs] [ms]   (defaults 5000 runs, 200 ms)');
  process.exit(2);
}

/** A service that answers every call after DELAY_MS, counting calls at once and answers. */
async function slowService() {
  let current = 0;
  let most = 0;
  let answered = 0;
  let first = 0;
  let last = 0;
  const server = createServer((req, res) => {
    if (!first) first = performance.now();
    current++;
    most = Math.max(most, current);
    req.resume();
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      current--;
      answered++;
      last = performance.now();
    }, DELAY_MS);
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    host: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    stats: () => ({ most, answered, seconds: (last - first) / 1000 }),
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}

function finished(dbFile: string): { done: number; failed: number } {
  const db = new Database(dbFile, { readonly: true });
  try {
    const r = db.prepare("SELECT SUM(status IN ('COMPLETED', 'FAILED')) AS done, SUM(status = 'FAILED') AS failed FROM workflow_runs").get() as {
      done: number | null;
      failed: number | null;
    };
    return { done: r.done ?? 0, failed: r.failed ?? 0 };
  } finally {
    db.close();
  }
}

async function main(): Promise<void> {
  const service = await slowService();
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-latency-'));
  const env = {
    ...process.env,
    SVC_DATA_DIR: dataDir,
    SVC_LOG_LEVEL: 'warn',
    SVC_WEBHOOK_RATE_LIMIT: '1000000',
    SVC_HTTP_ALLOWED_HOSTS: service.host,
    SVC_WORKSPACE_CONCURRENCY: process.env.SVC_WORKSPACE_CONCURRENCY ?? '1000',
  };
  const svc = { child: undefined as import('node:child_process').ChildProcess | undefined };
  try {
    execFileSync(join(root, 'bin', 'svc'), ['init', '--yes', '--plan', 'PRO', '--email', 'bench@example.com', '--password-stdin'], {
      env,
      input: PASSWORD,
      stdio: ['pipe', 'ignore', 'inherit'],
    });
    const started = await startProcess(join(root, 'bin', 'svc'), ['serve', '--port', '0'], env, /svc listening on (\S+)/);
    svc.child = started.child;
    const base = started.match[1]!;
    const login = await json(`${base}/auth/login`, 'POST', { email: 'bench@example.com', password: PASSWORD });
    const wf = await json(
      `${base}/workflows`,
      'POST',
      {
        name: 'latency',
        triggerSource: 'WEBHOOK',
        status: 'ACTIVE',
        steps: [{ type: 'http_request', method: 'POST', url: `http://${service.host}/call?run={{ run.id }}`, body: { email: '{{ contact.email }}' } }],
        webhook: { lookup: 'email', createIfNotFound: true },
      },
      login.token,
    );
    const path = new URL(wf.webhook.url as string).pathname;
    const cpuBefore = cpuMs(svc.child.pid!);
    const requests = Array.from({ length: Math.min(RUNS, 1000) }, (_, i) => ({
      method: 'POST' as const,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: `user${i}@example.com` }),
    }));
    const intake = await autocannon({ url: base + path, connections: 50, amount: RUNS, requests });
    if (intake.non2xx || intake.errors) throw new Error(`webhooks: ${intake.non2xx} non-2xx answers, ${intake.errors} errors`);
    const waitStarted = Date.now();
    // RSS while the runs execute after the intake is over: runs in flight, not requests.
    let rssExecuting = 0;
    for (;;) {
      rssExecuting = Math.max(rssExecuting, rssMb(svc.child.pid!));
      const { done } = finished(join(dataDir, 'svc.db'));
      if (done >= RUNS) break;
      if (Date.now() - waitStarted > 300_000) throw new Error(`only ${done} of ${RUNS} runs finished after 300 s`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const cpu = cpuMs(svc.child.pid!) - cpuBefore;
    const { failed } = finished(join(dataDir, 'svc.db'));
    const s = service.stats();
    console.log(
      `latency: ${RUNS} webhook-started runs, one http_request step answered after ${DELAY_MS} ms; default settings except SVC_WORKSPACE_CONCURRENCY=${env.SVC_WORKSPACE_CONCURRENCY} (so one workspace may fill the node's slots)`,
    );
    console.log(
      `  ${Math.round(s.answered / s.seconds)} runs/s (first call to last answer, ${s.seconds.toFixed(1)} s), ${failed} failed   (target >= 1000 at 200 ms)`,
    );
    console.log(`  at most ${s.most} calls in flight at once   (target >= 200)`);
    console.log(
      `  webhooks accepted at ${Math.round(intake.requests.average)} req/s; server CPU ${((cpu / RUNS) * 1000).toFixed(0)} µs per run (intake and execution)`,
    );
    console.log(`  peak RSS ${peakRssMb(svc.child.pid!)} MB (intake and execution); at most ${rssExecuting} MB while executing after the intake`);
  } finally {
    if (svc.child) await stop(svc.child);
    service.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
