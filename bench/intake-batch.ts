// npm run bench:batch: what an accepted webhook costs in SQLite, without HTTP. The real intake
// (db/intake.ts, through the WriteBatcher on the store's writer, synchronous=FULL) writes
// what an accepted request writes (its run, its event, the month's count) in batches of 30
// jobs, as a node under bench:webhook's load commits them; then the engine's claim (the
// scheduler's statement) takes those runs RUNNING in batches of the same size. Each variant is
// a copy of one database made by `svc init` with bench:webhook's workflow: as migrated, and
// without each index the two inserts write, to show what each costs. Prints CPU time of this
// process (all its threads) per request, the median of BENCH_ROUNDS rounds (default 3).
// BENCH_INDEXES=0 measures the database as migrated only; BENCH_BATCH sets the jobs a batch
// (default 30), so that runs at several sizes show what a batch costs whatever its size.
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openSqliteStore } from '../src/core/db/store.js';
import { sqliteSchedulerSql } from '../src/engine/sql.js';
import { replayIntake } from './intake-replay.js';
import { startWebhookNode, stop } from './lib.js';

const BATCH = Number(process.env.BENCH_BATCH ?? 30);
const BATCHES = Number(process.env.BENCH_BATCHES ?? 1000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const INDEXES = [
  'workflow_runs_workflow_idx',
  'workflow_runs_workspace_idx',
  'workflow_runs_workspace_status_idx',
  'workflow_runs_contact_idx',
  'workflow_runs_ready_idx',
  'webhook_events_workflow_idx',
];

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const cpuUs = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

/** One variant on a fresh copy of the database: µs of CPU per request for intake, and per run for the claim. */
async function measure(source: string, drop: string | null): Promise<{ intake: number; claim: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-batch-'));
  try {
    const file = join(dir, 'svc.db');
    copyFileSync(source, file);
    const store = openSqliteStore(file);
    if (drop) store.writer.$client.exec(`DROP INDEX ${drop}`);
    const { workspaceId, batcher, accept, close } = replayIntake(store);
    const scheduler = sqliteSchedulerSql(store.writer);
    let intakeUs = 0;
    let claimUs = 0;
    for (let b = 0; b < BATCHES; b++) {
      const before = cpuUs();
      // Queued in one turn of the event loop: one transaction, one fsync.
      await Promise.all(Array.from({ length: BATCH }, accept));
      const between = cpuUs();
      const now = new Date().toISOString();
      const until = new Date(Date.now() + 30_000).toISOString();
      await batcher.run(() => {
        const claimed = scheduler.claim(workspaceId, BATCH, now, until, `bench-${b}`) as { id: number }[];
        if (claimed.length !== BATCH) throw new Error(`claimed ${claimed.length} runs, not ${BATCH}`);
      });
      claimUs += cpuUs() - between;
      intakeUs += between - before;
    }
    await close();
    await store.close();
    return { intake: intakeUs / (BATCH * BATCHES), claim: claimUs / (BATCH * BATCHES) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// A database as bench:webhook's node has it: svc init, the contact and the signed workflow.
const node = await startWebhookNode({ engine: false });
await stop(node.child);
const source = join(node.dataDir, 'svc.db');
try {
  console.log(`intake batch replay: ${BATCHES} batches of ${BATCH} accepted requests, then the claim of their runs; median of ${ROUNDS} rounds`);
  for (const drop of [null, ...(process.env.BENCH_INDEXES === '0' ? [] : INDEXES)]) {
    const rounds = [];
    for (let r = 0; r < ROUNDS; r++) rounds.push(await measure(source, drop));
    const intake = median(rounds.map((x) => x.intake));
    const claim = median(rounds.map((x) => x.claim));
    console.log(
      `${(drop ? `without ${drop}` : 'as migrated').padEnd(48)} intake ${intake.toFixed(1).padStart(5)} µs a request   claim ${claim.toFixed(1).padStart(5)} µs a run`,
    );
  }
} finally {
  rmSync(node.dataDir, { recursive: true, force: true });
}
