import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';

export interface LoadResult {
  requests: number;
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx: number;
}

/** Starts a process and resolves once it prints a line matching `ready`. */
export function startProcess(cmd: string, args: string[], env: NodeJS.ProcessEnv, ready: RegExp): Promise<{ child: ChildProcess; match: RegExpMatchArray }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      const match = out.match(ready);
      if (match) {
        child.stdout!.off('data', onData);
        child.stdout!.resume();
        child.stderr!.resume();
        resolve({ child, match });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
    child.once('exit', (code) => reject(new Error(`${cmd} exited with ${code} before it was ready:\n${out}`)));
  });
}

export function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

/**
 * A /proc stat line read: the process's or thread's name and its user plus system CPU time so
 * far, in milliseconds (the name may hold spaces and parentheses: the fields follow its last ')').
 */
function parseStat(stat: string): { name: string; ms: number } {
  const close = stat.lastIndexOf(')');
  const fields = stat.slice(close + 2).split(' ');
  return { name: stat.slice(stat.indexOf('(') + 1, close), ms: ((Number(fields[11]) + Number(fields[12])) * 1000) / 100 };
}

/** User plus system CPU time of a process so far, in milliseconds (from /proc). */
export function cpuMs(pid: number): number {
  return parseStat(readFileSync(`/proc/${pid}/stat`, 'utf8')).ms;
}

/**
 * User plus system CPU time of a process so far by thread name, in milliseconds (from
 * /proc/PID/task): MainThread, WorkerThread (the engine's threads, summed), V8Worker (V8's
 * helpers: parallel GC and compilation), libuv-worker. Threads that ended are not counted.
 */
export function threadCpuMs(pid: number): Map<string, number> {
  const byName = new Map<string, number>();
  let tasks: string[] = [];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return byName;
  }
  for (const task of tasks) {
    try {
      const { name, ms } = parseStat(readFileSync(`/proc/${pid}/task/${task}/stat`, 'utf8'));
      byName.set(name, (byName.get(name) ?? 0) + ms);
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return byName;
}

/** Resident set size of a process now (VmRSS), in MB. */
export function rssMb(pid: number): number {
  try {
    return Math.round(Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024);
  } catch {
    return NaN;
  }
}

/** Peak resident set size of a process, from /proc (VmHWM), in MB. */
/**
 * Starts a process's peak RSS (VmHWM) again from what it uses now (Linux: clear_refs 5), so
 * that the peak reported is the one under the load that follows, not the set-up's: the
 * benchmark's login hashes its password with scrypt, which takes 32 MiB for a moment.
 */
export function resetPeakRss(pid: number): void {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5');
  } catch {
    // Not Linux, or not allowed: the peak then counts from the process's start.
  }
}

export function peakRssMb(pid: number): number {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0);
    return Math.round(kb / 1024);
  } catch {
    return NaN;
  }
}

export async function load(opts: { url: string; body: string; headers: Record<string, string>; seconds: number; connections: number }): Promise<LoadResult> {
  const result = await autocannon({
    url: opts.url,
    method: 'POST',
    body: opts.body,
    headers: opts.headers,
    duration: opts.seconds,
    connections: opts.connections,
    pipelining: 1,
  });
  return {
    requests: result.requests.total,
    rps: Math.round(result.requests.average),
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.timeouts,
    non2xx: result.non2xx,
  };
}

export async function json(url: string, method: string, body?: unknown, token?: string): Promise<any> {
  const res = await fetch(url, {
    method,
    headers: { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...(token ? { authorization: `Bearer ${token}` } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${url}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

/**
 * An open-loop load generator at a fixed rate: requests are sent on schedule whether or
 * not earlier ones have been answered, and each latency is measured from its own send.
 */
export async function fixedRate(opts: {
  url: string;
  rate: number;
  seconds: number;
  requests: { headers: Record<string, string>; body: string }[];
  connections?: number;
}): Promise<{ sent: number; ok: number; failed: number; p50: number; p99: number; rps: number }> {
  const { Pool } = await import('undici');
  const target = new URL(opts.url);
  const pool = new Pool(target.origin, { connections: opts.connections ?? 100, pipelining: 1 });
  const latencies: number[] = [];
  let sent = 0;
  let ok = 0;
  let failed = 0;
  const pending: Promise<void>[] = [];
  const started = performance.now();
  const total = Math.round(opts.rate * opts.seconds);
  while (sent < total) {
    const due = Math.floor(((performance.now() - started) / 1000) * opts.rate);
    for (; sent < Math.min(due, total); sent++) {
      const r = opts.requests[sent % opts.requests.length]!;
      const t0 = performance.now();
      pending.push(
        pool
          .request({ method: 'POST', path: target.pathname, headers: r.headers, body: r.body })
          .then(async (res) => {
            await res.body.dump();
            latencies.push(performance.now() - t0);
            if (res.statusCode < 300) ok++;
            else failed++;
          })
          .catch(() => {
            failed++;
          }),
      );
    }
    await new Promise((r) => setTimeout(r, 1));
  }
  await Promise.all(pending);
  const elapsed = (performance.now() - started) / 1000;
  await pool.close();
  latencies.sort((a, b) => a - b);
  const at = (q: number) => Math.round((latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0) * 10) / 10;
  return { sent, ok, failed, p50: at(0.5), p99: at(0.99), rps: Math.round(ok / elapsed) };
}

const BENCH_ROOT = fileURLToPath(new URL('..', import.meta.url));
const BENCH_SECRET = 'bench-signing-secret';
const BENCH_PASSWORD = 'bench-password-123';

/** The webhook the benchmarks post: a payment provider's shape, with the contact's email nested. */
export const WEBHOOK_BODY = JSON.stringify({
  id: 'evt_bench',
  type: 'checkout.session.completed',
  data: { object: { id: 'cs_1', customer_details: { email: 'carol@example.net', name: 'Carol' }, amount_total: 4900 } },
});
export const WEBHOOK_SIGNATURE = `sha256=${createHmac('sha256', BENCH_SECRET).update(WEBHOOK_BODY).digest('hex')}`;

/**
 * `svc serve` (the built bundle of `checkout`, as a user runs it) on a fresh data folder, with
 * the benchmark's contact and a signed webhook workflow (nested email lookup, one add_tags
 * step). `nodeFlags` start it through this Node with those flags (a CPU profile, say).
 */
export async function startWebhookNode(opts: { engine: boolean; checkout?: string; nodeFlags?: string[] }): Promise<{
  child: ChildProcess;
  url: string;
  base: string;
  token: string;
  dataDir: string;
}> {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-'));
  const env = { ...process.env, SVC_DATA_DIR: dataDir, SVC_LOG_LEVEL: 'warn', SVC_WEBHOOK_RATE_LIMIT: '1000000', SVC_ENGINE: String(opts.engine) };
  const svcBin = join(opts.checkout ?? BENCH_ROOT, 'bin', 'svc');
  execFileSync(svcBin, ['init', '--yes', '--plan', 'PRO', '--email', 'bench@example.com', '--password-stdin', '--json'], {
    env,
    input: BENCH_PASSWORD,
    stdio: ['pipe', 'ignore', 'inherit'],
  });
  const [command, args] = opts.nodeFlags ? [process.execPath, [...opts.nodeFlags, svcBin, 'serve', '--port', '0']] : [svcBin, ['serve', '--port', '0']];
  const svc = await startProcess(command, args, env, /svc listening on (\S+)/);
  const base = svc.match[1]!;
  const login = await json(`${base}/auth/login`, 'POST', { email: 'bench@example.com', password: BENCH_PASSWORD });
  await json(`${base}/contacts`, 'POST', { email: 'carol@example.net', firstName: 'Carol' }, login.token);
  const wf = await json(
    `${base}/workflows`,
    'POST',
    {
      name: 'bench',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: [{ type: 'add_tags', tags: ['customer'] }],
      webhook: { lookup: 'email', path: 'data.object.customer_details.email', signingSecret: BENCH_SECRET },
    },
    login.token,
  );
  return { child: svc.child, url: wf.webhook.url, base, token: login.token, dataDir };
}

/**
 * The engine benchmarks' workflow: three steps (update_contact, send_email through the outbox,
 * add_tags), a webhook that creates its contact; returns the webhook's URL.
 */
export async function setUpRunWorkflow(base: string, email: string, password: string): Promise<string> {
  const login = await json(`${base}/auth/login`, 'POST', { email, password });
  const template = await json(
    `${base}/templates`,
    'POST',
    { name: 'welcome', channel: 'EMAIL', content: { subject: 'Welcome {{ contact.firstName }}', text: 'Order {{ trigger.order.id }}' } },
    login.token,
  );
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

/** Bodies for setUpRunWorkflow's webhook: up to `customers` different customers (1,000 unless said), cycled. */
export function runRequests(count: number, customers = 1000) {
  return Array.from({ length: Math.min(count, customers) }, (_, i) => ({
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ customer: { email: `user${i}@example.com`, name: `User ${i}` }, order: { id: `o-${i}` } }),
  }));
}

/**
 * A closed-loop load: `count` requests over `concurrency` connections, each request taking the
 * next body in order (so requests sent at the same moment name different customers, where
 * autocannon's connections would each start from the first body, all at once). Resolves with
 * the seconds taken and the answers that were not 2xx (or failed).
 */
export async function sendInOrder(opts: {
  url: string;
  count: number;
  concurrency: number;
  requests: { headers: Record<string, string>; body: string }[];
}): Promise<{ seconds: number; failed: number }> {
  const { Pool } = await import('undici');
  const target = new URL(opts.url);
  const pool = new Pool(target.origin, { connections: opts.concurrency, pipelining: 1 });
  let next = 0;
  let failed = 0;
  const started = performance.now();
  const lane = async () => {
    while (next < opts.count) {
      const r = opts.requests[next++ % opts.requests.length]!;
      try {
        const res = await pool.request({ method: 'POST', path: target.pathname, headers: r.headers, body: r.body });
        await res.body.dump();
        if (res.statusCode >= 300) failed++;
      } catch {
        failed++;
      }
    }
  };
  await Promise.all(Array.from({ length: opts.concurrency }, lane));
  await pool.close();
  return { seconds: (performance.now() - started) / 1000, failed };
}
