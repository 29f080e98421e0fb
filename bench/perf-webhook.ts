// npm run bench:perf: where a webhook node's CPU goes, user and kernel time of every thread,
// from Linux `perf record` (the linux-perf package) rather than V8's profiler, which sees
// neither SQLite's C code nor the kernel's socket and file work. It profiles an ingest-only
// node, then one with its engine executing the runs, under the same load, and prints each
// one's CPU per accepted request by thread and by binary (svc's JavaScript, Node and V8,
// SQLite, the kernel, libc), then the functions whose cost per request differs most between
// the two. BENCH_SECONDS sets how long each is sampled (default 12).
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { load, startWebhookNode, stop, WEBHOOK_BODY, WEBHOOK_SIGNATURE } from './lib.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 12);
const HZ = 1999;
const TOP = Number(process.env.PROFILE_TOP ?? 20);
const headers = { 'content-type': 'application/json', 'x-service-signature': WEBHOOK_SIGNATURE };

try {
  execFileSync('perf', ['--version'], { stdio: 'ignore' });
} catch {
  console.error('bench:perf needs Linux perf (apt-get install linux-perf)');
  process.exit(1);
}

/** Samples of one node under load: perf.data, and the requests answered while it sampled. */
async function record(engine: boolean, dir: string): Promise<{ file: string; requests: number }> {
  // JIT frames named (perf map), so svc's JavaScript shows by function.
  const node = await startWebhookNode({ engine, nodeFlags: ['--perf-basic-prof-only-functions'] });
  const file = join(dir, `${engine ? 'engine' : 'ingest'}.data`);
  try {
    await load({ url: node.url, body: WEBHOOK_BODY, headers, seconds: 5, connections: 50 });
    const perf = spawn('perf', ['record', '-F', String(HZ), '-g', '-p', String(node.child.pid), '-o', file, '--', 'sleep', String(SECONDS)], {
      stdio: 'ignore',
    });
    const done = new Promise((resolve) => perf.on('exit', resolve));
    // The load outlasts the sampling a little on each side; requests are counted at its rate.
    const r = await load({ url: node.url, body: WEBHOOK_BODY, headers, seconds: SECONDS + 2, connections: 50 });
    await done;
    return { file, requests: r.rps * SECONDS };
  } finally {
    await stop(node.child);
    rmSync(node.dataDir, { recursive: true, force: true });
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

const dir = mkdtempSync(join(tmpdir(), 'svc-perf-'));
try {
  const runs = { ingest: await record(false, dir), engine: await record(true, dir) };
  const byThread = Object.fromEntries(Object.entries(runs).map(([k, r]) => [k, perRequest(r.file, r.requests, 'comm,dso')]));
  const bySymbol = Object.fromEntries(Object.entries(runs).map(([k, r]) => [k, perRequest(r.file, r.requests, 'comm,sym')]));
  for (const [name, rows] of Object.entries(byThread)) {
    const total = [...rows.values()].reduce((a, b) => a + b, 0);
    console.log(
      `\n${name === 'ingest' ? 'ingest-only' : 'with the engine'}: ${total.toFixed(1)} µs of CPU per request (${runs[name as 'ingest'].requests} requests sampled)`,
    );
    for (const [key, us] of [...rows].sort((a, b) => b[1] - a[1]).filter(([, us]) => us >= 0.3)) console.log(`  ${us.toFixed(1).padStart(6)} µs  ${key}`);
  }
  const keys = new Set([...bySymbol.ingest!.keys(), ...bySymbol.engine!.keys()]);
  const diff = [...keys].map((k) => [k, (bySymbol.engine!.get(k) ?? 0) - (bySymbol.ingest!.get(k) ?? 0)] as const).sort((a, b) => b[1] - a[1]);
  console.log(`\nfunctions costing most more per request with the engine on (top ${TOP}; µs ingest-only -> with the engine):`);
  for (const [key, d] of diff.slice(0, TOP))
    console.log(
      `  ${d >= 0 ? '+' : ''}${d.toFixed(2).padStart(5)}  ${(bySymbol.ingest!.get(key) ?? 0).toFixed(2)} -> ${(bySymbol.engine!.get(key) ?? 0).toFixed(2)}  ${key.slice(0, 110)}`,
    );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
