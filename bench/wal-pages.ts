// npm run bench:wal: the pages one intake batch writes to the WAL, by table and index. The
// real intake (db/intake.ts through the WriteBatcher, as bench:batch drives it) commits
// BENCH_BATCHES batches (default 100) of 30 accepted requests into a copy of bench:webhook's
// database, after 200 to warm it, with automatic checkpoints off; then the WAL's frame
// headers give each written page's number, and SQLite's dbstat names its table or index.
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openSqliteStore } from '../src/core/db/store.js';
import { replayIntake } from './intake-replay.js';
import { startWebhookNode, stop } from './lib.js';

// A database as bench:webhook's node has it: svc init, the contact and the signed workflow.
const node = await startWebhookNode({ engine: false });
await stop(node.child);
const dir = mkdtempSync(join(tmpdir(), 'svc-bench-wal-'));
const file = join(dir, 'svc.db');
copyFileSync(join(node.dataDir, 'svc.db'), file);
const store = openSqliteStore(file);
const c = store.writer.$client;
const { accept, close } = replayIntake(store);
// Warmed by 200 batches first, so that the tables and indexes have their steady shape.
for (let b = 0; b < 200; b++) await Promise.all(Array.from({ length: 30 }, accept));
c.pragma('wal_checkpoint(TRUNCATE)');
c.pragma('wal_autocheckpoint = 0');
const B = Number(process.env.BENCH_BATCHES ?? 100);
for (let b = 0; b < B; b++) await Promise.all(Array.from({ length: 30 }, accept));
const wal = readFileSync(file + '-wal');
const pgsz = wal.readUInt32BE(8);
const frames = (wal.length - 32) / (pgsz + 24);
const count = new Map<number, number>();
for (let i = 0; i < frames; i++) {
  const pg = wal.readUInt32BE(32 + i * (pgsz + 24));
  count.set(pg, (count.get(pg) ?? 0) + 1);
}
console.log(`WAL pages written a batch of 30 accepted requests: ${(frames / B).toFixed(1)} of ${pgsz} bytes (${B} batches); by table or index:`);
const names = new Map<number, string>();
for (const r of c.prepare('SELECT name, pageno FROM dbstat').all() as { name: string; pageno: number }[]) names.set(r.pageno, r.name);
const byName = new Map<string, number>();
for (const [pg, n] of count) {
  const k = names.get(pg) ?? `page ${pg}`;
  byName.set(k, (byName.get(k) ?? 0) + n);
}
for (const [k, n] of [...byName].sort((a, b) => b[1] - a[1])) console.log((n / B).toFixed(2).padStart(6), k);
await close();
await store.close();
rmSync(dir, { recursive: true, force: true });
rmSync(node.dataDir, { recursive: true, force: true });
