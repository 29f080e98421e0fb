// npm run bench: webhook ingest measured side by side with a bare Fastify route.
// (a) bare: parse the same JSON body, answer 202. (b) svc: a signed webhook with a nested
// email lookup of an existing contact and a durable run insert, answered after COMMIT, on an
// ingest-only node. (c) the same with the engine executing each run on the same node.
// Each server runs in its own process; autocannon drives them from this one, on loopback.
import { rmSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { prepareBaseline } from './baseline.js';
import {
  cpuMs,
  json,
  load,
  peakRssMb,
  resetPeakRss,
  startProcess,
  startWebhookNode,
  stop,
  threadCpuMs,
  WEBHOOK_BODY,
  WEBHOOK_SIGNATURE,
  type LoadResult,
} from './lib.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const WARMUP = Number(process.env.BENCH_WARMUP_SECONDS ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);

const body = WEBHOOK_BODY;
const signature = WEBHOOK_SIGNATURE;

function row(name: string, r: LoadResult, rss: number): string {
  return `${name.padEnd(8)} ${String(r.rps).padStart(8)} req/s   p50 ${String(r.p50).padStart(4)} ms   p99 ${String(r.p99).padStart(4)} ms   errors ${r.errors}   non-2xx ${r.non2xx}   peak RSS ${rss} MB`;
}

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

/**
 * Both servers stay up and are measured in alternating rounds, so that a busy moment of
 * the machine hits both alike; the ratio reported is the median of the rounds' ratios.
 */
interface Target {
  name: string;
  url: string;
  headers: Record<string, string>;
  pid: number;
  /** Resolves once the work the requests started is done (the engine's runs), so that its CPU is counted. */
  settle?: () => Promise<void>;
}

async function compare(targets: Target[]): Promise<{ results: LoadResult[][]; cpuUs: number[][]; threadUs: Map<string, number>[][] }> {
  // Peak RSS under the load, from here on: not the set-up's login (scrypt takes 32 MiB).
  for (const t of targets) resetPeakRss(t.pid);
  for (const t of targets) {
    await load({ url: t.url, body, headers: t.headers, seconds: WARMUP, connections: CONNECTIONS });
    await t.settle?.();
  }
  const results: LoadResult[][] = targets.map(() => []);
  // Server CPU time (user + system) per answered request: what a busy load generator
  // sharing the machine cannot distort, unlike req/s.
  const cpuUs: number[][] = targets.map(() => []);
  // The same by thread: where it goes (the main thread, the engine's threads, V8's helpers).
  const threadUs: Map<string, number>[][] = targets.map(() => []);
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, t] of targets.entries()) {
      const before = cpuMs(t.pid);
      const threadsBefore = threadCpuMs(t.pid);
      const r = await load({ url: t.url, body, headers: t.headers, seconds: SECONDS, connections: CONNECTIONS });
      await t.settle?.();
      results[i]!.push(r);
      const per = (ms: number) => (ms * 1000) / Math.max(1, r.requests);
      cpuUs[i]!.push(per(cpuMs(t.pid) - before));
      threadUs[i]!.push(new Map([...threadCpuMs(t.pid)].map(([name, ms]) => [name, per(ms - (threadsBefore.get(name) ?? 0))])));
    }
  }
  return { results, cpuUs, threadUs };
}

function summary(results: LoadResult[]): LoadResult {
  return {
    requests: results.reduce((n, r) => n + r.requests, 0),
    rps: median(results.map((r) => r.rps)),
    p50: median(results.map((r) => r.p50)),
    p99: median(results.map((r) => r.p99)),
    errors: results.reduce((n, r) => n + r.errors, 0),
    non2xx: results.reduce((n, r) => n + r.non2xx, 0),
  };
}

/** Runs not yet finished on a server (QUEUED or RUNNING). */
async function unfinished(base: string, token: string): Promise<number> {
  let n = 0;
  for (const status of ['QUEUED', 'RUNNING']) n += (await json(`${base}/runs?status=${status}&limit=1`, 'GET', undefined, token)).data.length;
  return n;
}

async function main(): Promise<void> {
  const baseline = prepareBaseline();
  const headers = { 'content-type': 'application/json', 'x-service-signature': signature };
  // (a) the bare route; (b) an ingest-only svc, as a dedicated webhook node runs; (c) svc with
  // its engine executing every accepted run on the same node (CPU counted until all finished);
  // then (b) and (c) of the baseline build, so that this build is compared with it in one run.
  const bare = await startProcess(process.execPath, ['--import', 'tsx', join(root, 'bench', 'bare.ts')], { ...process.env }, /listening (\S+)/);
  const servers = [
    { name: 'svc', svc: await startWebhookNode({ engine: false }) },
    { name: 'svc+eng', svc: await startWebhookNode({ engine: true }) },
    ...(baseline
      ? [
          { name: 'base', svc: await startWebhookNode({ engine: false, checkout: baseline.dir }) },
          { name: 'base+eng', svc: await startWebhookNode({ engine: true, checkout: baseline.dir }) },
        ]
      : []),
  ];
  const targets: Target[] = [
    { name: 'bare', url: `${bare.match[1]}/bare`, headers: { 'content-type': 'application/json' }, pid: bare.child.pid! },
    ...servers.map(({ name, svc }) => ({
      name,
      url: svc.url,
      headers,
      pid: svc.child.pid!,
      settle: name.endsWith('+eng')
        ? async () => {
            while ((await unfinished(svc.base, svc.token)) > 0) await new Promise((r) => setTimeout(r, 100));
          }
        : undefined,
    })),
  ];
  try {
    const { results, cpuUs, threadUs } = await compare(targets);
    const byName = (name: string) => targets.findIndex((t) => t.name === name);
    const bareRounds = results[0]!;
    const bareCpu = cpuUs[0]!;
    console.log(
      `webhook ingest: ${CONNECTIONS} connections, ${ROUNDS} alternating rounds of ${SECONDS} s after ${WARMUP} s warm-up, node ${process.version}, ${availableParallelism()} CPUs`,
    );
    if (baseline) console.log(`base = the baseline build ${baseline.label}, measured in the same rounds`);
    for (const [i, t] of targets.entries()) console.log(row(t.name, summary(results[i]!), peakRssMb(t.pid)));
    const ratios = bareRounds.map((b, i) => results[byName('svc')]![i]!.rps / b.rps);
    console.log(`ratio svc/bare per round: ${ratios.map((r) => r.toFixed(2)).join(', ')}`);
    console.log(`ratio svc/bare (median): ${median(ratios).toFixed(2)} (target >= 0.35)`);
    const us = (v: number[]) => v.map((x) => x.toFixed(0)).join(', ');
    console.log(`server CPU per request, per round (µs; +eng until its runs finished): ${targets.map((t, i) => `${t.name} ${us(cpuUs[i]!)}`).join('; ')}`);
    const cpuRatio = (name: string, against = bareCpu) => median(cpuUs[byName(name)]!.map((x, i) => x / against[i]!)).toFixed(2);
    console.log(`CPU per request vs bare (median of rounds): svc ${cpuRatio('svc')}x (target <= 2), svc+engine ${cpuRatio('svc+eng')}x (target <= 3.5)`);
    // Threads under 0.5 µs a request (signal handling, timers) are left out.
    const byThread = (i: number) => {
      const names = [...new Set(threadUs[i]!.flatMap((m) => [...m.keys()]))];
      return names
        .map((name): [string, number] => [name, median(threadUs[i]!.map((m) => m.get(name) ?? 0))])
        .filter(([, us]) => us >= 0.5)
        .sort((a, b) => b[1] - a[1])
        .map(([name, us]) => `${name} ${us.toFixed(0)}`)
        .join(', ');
    };
    console.log(`CPU per request by thread (µs, median of rounds): ${targets.map((t, i) => `${t.name}: ${byThread(i)}`).join('; ')}`);
    if (baseline) {
      console.log(`CPU per request vs bare, baseline: base ${cpuRatio('base')}x, base+engine ${cpuRatio('base+eng')}x`);
      console.log(
        `CPU per request vs the baseline (median of rounds): svc ${cpuRatio('svc', cpuUs[byName('base')])}x, svc+engine ${cpuRatio('svc+eng', cpuUs[byName('base+eng')])}x (target <= 1.10)`,
      );
    }
    for (const [i, t] of targets.entries()) {
      const s = summary(results[i]!);
      if (s.errors || s.non2xx) console.log(`WARNING: ${t.name} answered errors or non-2xx responses`);
    }
  } finally {
    await Promise.all([stop(bare.child), ...servers.map(({ svc }) => stop(svc.child))]);
    for (const { svc } of servers) rmSync(svc.dataDir, { recursive: true, force: true });
  }
}

await main();
