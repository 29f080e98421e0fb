// npm run bench: webhook ingest measured side by side with a bare Fastify route.
// (a) bare: parse the same JSON body, answer 202. (b) svc: a signed webhook with a nested
// email lookup of an existing contact and a durable run insert, answered after COMMIT.
// Each server runs in its own process; autocannon drives both from this one, on loopback.
import { execFileSync } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { json, load, peakRssMb, startProcess, stop, type LoadResult } from './lib.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const WARMUP = Number(process.env.BENCH_WARMUP_SECONDS ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const SECRET = 'bench-signing-secret';
const PASSWORD = 'bench-password-123';

const body = JSON.stringify({
  id: 'evt_bench',
  type: 'checkout.session.completed',
  data: { object: { id: 'cs_1', customer_details: { email: 'carol@example.net', name: 'Carol' }, amount_total: 4900 } },
});
const signature = `sha256=${createHmac('sha256', SECRET).update(body).digest('hex')}`;

function row(name: string, r: LoadResult, rss: number): string {
  return `${name.padEnd(8)} ${String(r.rps).padStart(8)} req/s   p50 ${String(r.p50).padStart(4)} ms   p99 ${String(r.p99).padStart(4)} ms   errors ${r.errors}   non-2xx ${r.non2xx}   peak RSS ${rss} MB`;
}

async function measure(url: string, headers: Record<string, string>): Promise<LoadResult> {
  await load({ url, body, headers, seconds: WARMUP, connections: CONNECTIONS });
  return load({ url, body, headers, seconds: SECONDS, connections: CONNECTIONS });
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-'));
  const env = { ...process.env, SVC_DATA_DIR: dataDir, SVC_LOG_LEVEL: 'warn', SVC_WEBHOOK_RATE_LIMIT: '1000000' };
  const svcBin = join(root, 'bin', 'svc');
  try {
    execFileSync(svcBin, ['init', '--yes', '--plan', 'PRO', '--email', 'bench@example.com', '--password-stdin', '--json'], { env, input: PASSWORD, stdio: ['pipe', 'ignore', 'inherit'] });

    // (a) the bare route
    const bare = await startProcess(process.execPath, ['--import', 'tsx', join(root, 'bench', 'bare.ts')], env, /listening (\S+)/);
    const bareResult = await measure(`${bare.match[1]}/bare`, { 'content-type': 'application/json' });
    const bareRss = peakRssMb(bare.child.pid!);
    await stop(bare.child);

    // (b) svc serve, the built bundle as a user runs it
    const svc = await startProcess(svcBin, ['serve', '--port', '0'], env, /svc listening on (\S+)/);
    const base = svc.match[1]!;
    const login = await json(`${base}/auth/login`, 'POST', { email: 'bench@example.com', password: PASSWORD });
    await json(`${base}/contacts`, 'POST', { email: 'carol@example.net', firstName: 'Carol' }, login.token);
    const wf = await json(
      `${base}/workflows`,
      'POST',
      {
        name: 'bench',
        triggerSource: 'WEBHOOK',
        status: 'ACTIVE',
        steps: [{ type: 'add_tags', tags: ['customer'] }],
        webhook: { lookup: 'email', path: 'data.object.customer_details.email', signingSecret: SECRET },
      },
      login.token,
    );
    const svcResult = await measure(wf.webhook.url, { 'content-type': 'application/json', 'x-service-signature': signature });
    const svcRss = peakRssMb(svc.child.pid!);
    await stop(svc.child);

    const ratio = svcResult.rps / bareResult.rps;
    console.log(`webhook ingest, ${CONNECTIONS} connections, ${SECONDS} s after ${WARMUP} s warm-up, node ${process.version}`);
    console.log(row('bare', bareResult, bareRss));
    console.log(row('svc', svcResult, svcRss));
    console.log(`ratio svc/bare: ${ratio.toFixed(2)} (target >= 0.35)`);
    if (svcResult.errors || svcResult.non2xx) console.log('WARNING: svc answered errors or non-2xx responses');
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
