// npm run bench:profile: a CPU profile (--cpu-prof) of a node under webhook load, the path
// issue 9 asks to make cheaper: ingest-only, or with BENCH_ENGINE=1 with its engine executing
// the runs. BENCH_CHECKOUT profiles another built checkout (the baseline's, say); the
// .cpuprofile files (one per thread) go to PROFILE_DIR (default: a new temporary folder), and
// the main thread's is summed up here: where its time went, by function, self and inclusive.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { load, startWebhookNode, stop, WEBHOOK_BODY, WEBHOOK_SIGNATURE } from './lib.js';

const dir = process.env.PROFILE_DIR ?? mkdtempSync(join(tmpdir(), 'svc-profile-'));
const engine = process.env.BENCH_ENGINE === '1';
const TOP = Number(process.env.PROFILE_TOP ?? 25);

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

/** Shares of the sampled time by function (name, file, line): self, and inclusive of callees. */
function summarise(file: string): { self: [string, number][]; inclusive: [string, number][] } {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[] };
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const name = (n: ProfileNode) =>
    `${n.callFrame.functionName || '(anonymous)'} ${n.callFrame.url.replace(/^.*node_modules\//, '').replace(/^.*\/(dist|src)\//, '$1/')}:${n.callFrame.lineNumber}`;
  const timeBy = new Map<number, number>();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0;
    timeBy.set(id, (timeBy.get(id) ?? 0) + dt);
    total += dt;
  });
  const self = new Map<string, number>();
  const inclusive = new Map<string, number>();
  for (const [id, t] of timeBy) {
    const key = name(byId.get(id)!);
    self.set(key, (self.get(key) ?? 0) + t);
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const k = name(byId.get(at)!);
      if (seen.has(k)) continue;
      seen.add(k);
      inclusive.set(k, (inclusive.get(k) ?? 0) + t);
    }
  }
  const top = (m: Map<string, number>) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, TOP)
      .map(([k, v]): [string, number] => [k, (100 * v) / Math.max(1, total)]);
  return { self: top(self), inclusive: top(inclusive) };
}

const node = await startWebhookNode({
  engine,
  ...(process.env.BENCH_CHECKOUT ? { checkout: process.env.BENCH_CHECKOUT } : {}),
  nodeFlags: ['--cpu-prof', `--cpu-prof-dir=${dir}`],
});
const pid = node.child.pid!;
try {
  const r = await load({
    url: node.url,
    body: WEBHOOK_BODY,
    headers: { 'content-type': 'application/json', 'x-service-signature': WEBHOOK_SIGNATURE },
    seconds: Number(process.env.BENCH_SECONDS ?? 10),
    connections: 50,
  });
  console.log(`${engine ? 'with the engine' : 'ingest-only'}: ${r.rps} req/s, non-2xx ${r.non2xx}`);
  // The engine's runs finish before the profiles are written.
  if (engine) await new Promise((resolve) => setTimeout(resolve, 3_000));
} finally {
  await stop(node.child);
  rmSync(node.dataDir, { recursive: true, force: true });
}
// One file per thread: CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile; thread 0 is the main one.
const files = readdirSync(dir).filter((f) => f.includes(`.${pid}.`) && f.endsWith('.cpuprofile'));
// The launcher (bin/svc) may replace itself with the pinned Node (execve, same pid): its own
// short profile is written too, so the main thread's is the last one written.
const main = files
  .filter((f) => f.split('.')[4] === '0')
  .sort()
  .at(-1);
console.log(`profiles (one per thread) in ${dir}: ${files.join(', ')}`);
if (main) {
  const { self, inclusive } = summarise(join(dir, main));
  const show = (rows: [string, number][]) => rows.map(([k, v]) => `  ${v.toFixed(1).padStart(5)}%  ${k}`).join('\n');
  console.log(`main thread, share of sampled time, self (top ${TOP}):\n${show(self)}`);
  console.log(`main thread, inclusive of what each calls (top ${TOP}):\n${show(inclusive)}`);
}
