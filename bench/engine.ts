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
import { json, peakRssMb, startProcess, stop } from './lib.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const RUNS = Number(process.env.BENCH_RUNS ?? 20_000);
const RATE = Number(process.env.BENCH_RATE ?? 1000);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const PASSWORD = 'bench-password-123';

async function serve(env: NodeJS.ProcessEnv) {
  const svc = await startProcess(join(root, 'bin', 'svc'), ['serve', '--port', '0'], env, /svc listening on (\S+)/);
  return { svc, base: svc.match[1]! };
}

async function setUpWorkflow(base: string): Promise<string> {
  const login = await json(`${base}/auth/login`, 'POST', { email: 'bench@example.com', password: PASSWORD });
  const template = await json(`${base}/templates`, 'POST', { name: 'welcome', channel: 'EMAIL', content: { subject: 'Welcome {{ contact.firstName }}', text: 'Order {{ trigger.order.id }}' } }, login.token);
  const wf = await json(
    `${base}/workflows`,
    'POST',
    {
      name: 'bench',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: [
        { type: 'update_contact', set: { firstName: '{{ trigger.customer.name }}' } },
        { type: 'send_email', templateId: template.id },
        { type: 'add_tags', tags: ['customer'] },
      ],
      webhook: { lookup: 'email', path: 'customer.email', createIfNotFound: true },
    },
    login.token,
  );
  return wf.webhook.url as string;
}

function requests(count: number) {
  return Array.from({ length: Math.min(count, 1000) }, (_, i) => ({
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ customer: { email: `user${i}@example.com`, name: `User ${i}` }, order: { id: `o-${i}` } }),
  }));
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

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-engine-'));
  const dbFile = join(dataDir, 'svc.db');
  const env = { ...process.env, SVC_DATA_DIR: dataDir, SVC_LOG_LEVEL: 'warn', SVC_WEBHOOK_RATE_LIMIT: '1000000' };
  try {
    execFileSync(join(root, 'bin', 'svc'), ['init', '--yes', '--plan', 'PRO', '--email', 'bench@example.com', '--password-stdin'], { env, input: PASSWORD, stdio: ['pipe', 'ignore', 'inherit'] });

    // 1. throughput
    let { svc, base } = await serve(env);
    const url = await setUpWorkflow(base);
    const started = Date.now();
    await autocannon({ url, connections: 50, amount: RUNS, requests: requests(RUNS) });
    const ingestSeconds = (Date.now() - started) / 1000;
    let firstDone = 0;
    let lastDone = 0;
    let previous = 0;
    for (;;) {
      const c = counts(dbFile);
      const done = (c.COMPLETED ?? 0) + (c.FAILED ?? 0);
      if (done > 0 && !firstDone) firstDone = Date.now();
      if (done > previous) lastDone = Date.now();
      previous = done;
      if (done >= RUNS) break;
      if (Date.now() - lastDone > 30_000 && lastDone) throw new Error(`stalled at ${done} of ${RUNS}: ${JSON.stringify(c)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const c = counts(dbFile);
    const throughput = Math.round(RUNS / ((lastDone - started) / 1000));
    console.log(`engine: ${RUNS} runs of 3 steps (update_contact, send_email via outbox, add_tags), ${c.FAILED ?? 0} failed`);
    console.log(`  ingest ${Math.round(RUNS / ingestSeconds)} webhooks/s; all runs completed ${((lastDone - started) / 1000).toFixed(1)} s after the first webhook`);
    console.log(`  completed runs/s (webhook in to run done, end to end): ${throughput}   (target >= 1000)`);
    console.log(`  peak RSS ${peakRssMb(svc.child.pid!)} MB`);
    await stop(svc.child);

    // 2. keeping up, at a fixed webhook rate
    const measure = async (engine: boolean) => {
      ({ svc, base } = await serve({ ...env, SVC_ENGINE: engine ? 'true' : 'false' }));
      const before = counts(dbFile).QUEUED ?? 0;
      let maxBacklog = 0;
      const sampler = setInterval(() => (maxBacklog = Math.max(maxBacklog, (counts(dbFile).QUEUED ?? 0) - (engine ? 0 : before))), 250);
      const r = await autocannon({ url, connections: 50, overallRate: RATE, duration: SECONDS, requests: requests(RATE * SECONDS) });
      clearInterval(sampler);
      const end = counts(dbFile).QUEUED ?? 0;
      await stop(svc.child);
      return { p50: r.latency.p50, p99: r.latency.p99, rps: Math.round(r.requests.average), non2xx: r.non2xx, maxBacklog, endBacklog: end };
    };
    // Engine on first, while nothing is queued; the runs the engine-off pass leaves QUEUED
    // are simply left behind.
    const busy = await measure(true);
    const idle = await measure(false);
    console.log(`keeping up at ${RATE} webhooks/s for ${SECONDS} s:`);
    console.log(`  engine off: ${idle.rps} req/s, p50 ${idle.p50} ms, p99 ${idle.p99} ms (runs left QUEUED: ${idle.maxBacklog})`);
    console.log(`  engine on:  ${busy.rps} req/s, p50 ${busy.p50} ms, p99 ${busy.p99} ms, QUEUED backlog max ${busy.maxBacklog}, at the end ${busy.endBacklog}`);
    console.log(`  p99 ratio on/off: ${(busy.p99 / Math.max(1, idle.p99)).toFixed(2)} (target <= 2)`);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
