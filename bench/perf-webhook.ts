// npm run bench:perf: where a webhook node's CPU goes, user and kernel time of every thread,
// from Linux `perf record` (the linux-perf package) rather than V8's profiler, which sees
// neither SQLite's C code nor the kernel's socket and file work. It profiles an ingest-only
// node, then one with its engine executing the runs, under the same load, and prints each
// one's CPU per accepted request by thread and by binary (svc's JavaScript, Node and V8,
// SQLite, the kernel, libc), then the functions whose cost per request differs most between
// the two. BENCH_SECONDS sets how long each is sampled (default 12). BENCH_PERF_BARE=1 also
// profiles the bare Fastify route of bench/bare.ts under the same load and prints the
// functions costing most more per request in the ingest-only node than in it.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { load, startProcess, startWebhookNode, stop, WEBHOOK_BODY, WEBHOOK_SIGNATURE } from './lib.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 12);
const HZ = 1999;
const TOP = Number(process.env.PROFILE_TOP ?? 20);
const BARE = process.env.BENCH_PERF_BARE === '1';
const headers = { 'content-type': 'application/json', 'x-service-signature': WEBHOOK_SIGNATURE };

try {
  execFileSync('perf', ['--version'], { stdio: 'ignore' });
} catch {
  console.error('bench:perf needs Linux perf (apt-get install linux-perf)');
  process.exit(1);
}

/** Samples of one process under load at `url`: perf.data, and the requests answered while it sampled. */
async function sample(pid: number, url: string, hdrs: Record<string, string>, file: string): Promise<{ file: string; requests: number }> {
  await load({ url, body: WEBHOOK_BODY, headers: hdrs, seconds: 5, connections: 50 });
  const perf = spawn('perf', ['record', '-F', String(HZ), '-g', '-p', String(pid), '-o', file, '--', 'sleep', String(SECONDS)], { stdio: 'ignore' });
  const done = new Promise((resolve) => perf.on('exit', resolve));
  // The load outlasts the sampling a little on each side; requests are counted at its rate.
  const r = await load({ url, body: WEBHOOK_BODY, headers: hdrs, seconds: SECONDS + 2, connections: 50 });
  await done;
  return { file, requests: r.rps * SECONDS };
}

/** Samples of one svc node under load. */
async function record(engine: boolean, dir: string): Promise<{ file: string; requests: number }> {
  // JIT frames named (perf map), so svc's JavaScript shows by function.
  const node = await startWebhookNode({ engine, nodeFlags: ['--perf-basic-prof-only-functions'] });
  try {
    return await sample(node.child.pid!, node.url, headers, join(dir, `${engine ? 'engine' : 'ingest'}.data`));
  } finally {
    await stop(node.child);
    rmSync(node.dataDir, { recursive: true, force: true });
  }
}

/** Samples of the bare Fastify route under the same load. */
async function recordBare(dir: string): Promise<{ file: string; requests: number }> {
  const bare = await startProcess(
    process.execPath,
    ['--perf-basic-prof-only-functions', '--import', 'tsx', fileURLToPath(new URL('./bare.ts', import.meta.url))],
    { ...process.env },
    /listening (\S+)/,
  );
  try {
    return await sample(bare.child.pid!, `${bare.match[1]}/bare`, { 'content-type': 'application/json' }, join(dir, 'bare.data'));
  } finally {
    await stop(bare.child);
  }
}

/** µs of CPU per request by the given perf sort keys (samples at HZ). */
function perRequest(file: string, requests: number, sort: string): Map<string, number> {
  const text = execFileSync('perf', ['report', '-i', file, '--no-children', '--sort', sort, '--stdio', '-g', 'none', '-n'], {
    encoding: 'utf8',
    maxBuffer: 256 * 1024 * 1024,
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^\s*[\d.]+%\s+(\d+)\s+(.+?)\s*$/.exec(line);
    if (!m) continue;
    const key = m[2]!.replace(/\s+/g, ' ').replace(/\[JIT\] tid \d+/, '[JIT]');
    out.set(key, (out.get(key) ?? 0) + (Number(m[1]) / HZ / requests) * 1e6);
  }
  return out;
}

const LABELS: Record<string, string> = { bare: 'bare Fastify route', ingest: 'ingest-only', engine: 'with the engine' };

/** The TOP functions whose µs per request grow most from profile `from` to profile `to`. */
function printDiff(bySymbol: Record<string, Map<string, number>>, from: string, to: string, title: string): void {
  const a = bySymbol[from]!;
  const b = bySymbol[to]!;
  const keys = new Set([...a.keys(), ...b.keys()]);
  const diff = [...keys].map((k) => [k, (b.get(k) ?? 0) - (a.get(k) ?? 0)] as const).sort((x, y) => y[1] - x[1]);
  console.log(`\n${title} (top ${TOP}; µs ${LABELS[from]} -> ${LABELS[to]}):`);
  for (const [key, d] of diff.slice(0, TOP))
    console.log(`  ${d >= 0 ? '+' : ''}${d.toFixed(2).padStart(5)}  ${(a.get(key) ?? 0).toFixed(2)} -> ${(b.get(key) ?? 0).toFixed(2)}  ${key.slice(0, 110)}`);
}

const dir = mkdtempSync(join(tmpdir(), 'svc-perf-'));
try {
  const runs: Record<string, { file: string; requests: number }> = {
    ...(BARE ? { bare: await recordBare(dir) } : {}),
    ingest: await record(false, dir),
    engine: await record(true, dir),
  };
  const byThread = Object.fromEntries(Object.entries(runs).map(([k, r]) => [k, perRequest(r.file, r.requests, 'comm,dso')]));
  const bySymbol = Object.fromEntries(Object.entries(runs).map(([k, r]) => [k, perRequest(r.file, r.requests, 'comm,sym')]));
  for (const [name, rows] of Object.entries(byThread)) {
    const total = [...rows.values()].reduce((a, b) => a + b, 0);
    console.log(`\n${LABELS[name]}: ${total.toFixed(1)} µs of CPU per request (${runs[name]!.requests} requests sampled)`);
    for (const [key, us] of [...rows].sort((a, b) => b[1] - a[1]).filter(([, us]) => us >= 0.3)) console.log(`  ${us.toFixed(1).padStart(6)} µs  ${key}`);
  }
  if (BARE) printDiff(bySymbol, 'bare', 'ingest', 'functions costing most more per request in the ingest-only node than in the bare route');
  printDiff(bySymbol, 'ingest', 'engine', 'functions costing most more per request with the engine on');
} finally {
  rmSync(dir, { recursive: true, force: true });
}
