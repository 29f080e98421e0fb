// A CPU profile of an ingest-only node under webhook load (BENCH_CHECKOUT: another built
// checkout to profile, such as the baseline's). Writes a .cpuprofile into PROFILE_DIR.
import { execFileSync } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { json, load, startProcess, stop } from './lib.js';

const root = process.env.BENCH_CHECKOUT ?? fileURLToPath(new URL('..', import.meta.url));
const SECRET = 'bench-signing-secret';
const PASSWORD = 'bench-password-123';
const body = JSON.stringify({
  id: 'evt_bench',
  type: 'checkout.session.completed',
  data: { object: { id: 'cs_1', customer_details: { email: 'carol@example.net' } } },
});
const signature = `sha256=${createHmac('sha256', SECRET).update(body).digest('hex')}`;
const dataDir = mkdtempSync(join(tmpdir(), 'svc-prof-'));
const env = { ...process.env, SVC_DATA_DIR: dataDir, SVC_LOG_LEVEL: 'warn', SVC_WEBHOOK_RATE_LIMIT: '1000000', SVC_ENGINE: 'false' };
execFileSync(join(root, 'bin', 'svc'), ['init', '--yes', '--plan', 'PRO', '--email', 'bench@example.com', '--password-stdin'], {
  env,
  input: PASSWORD,
  stdio: ['pipe', 'ignore', 'inherit'],
});
const svc = await startProcess(
  process.execPath,
  ['--cpu-prof', `--cpu-prof-dir=${process.env.PROFILE_DIR ?? '/tmp/prof'}`, join(root, 'bin', 'svc'), 'serve', '--port', '0'],
  env,
  /svc listening on (\S+)/,
);
const base = svc.match[1]!;
const login = await json(`${base}/auth/login`, 'POST', { email: 'bench@example.com', password: PASSWORD });
await json(`${base}/contacts`, 'POST', { email: 'carol@example.net' }, login.token);
const wf = await json(
  `${base}/workflows`,
  'POST',
  {
    name: 'p',
    triggerSource: 'WEBHOOK',
    status: 'ACTIVE',
    steps: [{ type: 'add_tags', tags: ['x'] }],
    webhook: { lookup: 'email', path: 'data.object.customer_details.email', signingSecret: SECRET },
  },
  login.token,
);
const r = await load({
  url: wf.webhook.url,
  body,
  headers: { 'content-type': 'application/json', 'x-service-signature': signature },
  seconds: 10,
  connections: 50,
});
console.log(`${r.rps} req/s, non-2xx ${r.non2xx}`);
await stop(svc.child);
