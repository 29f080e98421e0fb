import { existsSync, mkdirSync, readdirSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config.js';
import { isAlive } from '../serverLock.js';
import { hostname } from 'node:os';
import { backupDatabase, fileStamp, type BackupResult } from './backup.js';

/**
 * Scheduled backups of a running server: every `backup.intervalSeconds` a backup into
 * `backup.dir` named svc-backup-<UTC time>.db, keeping the newest `backup.keep`. The first
 * one is due an interval after the newest backup already in the folder, so restarts do not
 * postpone backups for ever. One backup at a time; the copy runs in a worker thread.
 */

const BACKUP_NAME = /^svc-backup-(\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z)\.db$/;
const PARTIAL_NAME = /^svc-backup-.*\.db\.partial-(\d+)$/;

export interface BackupLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export interface BackupSchedule {
  /** Runs one backup now (tests, and the timer); resolves when it has been written and pruned. */
  runOnce(): Promise<BackupResult | null>;
  stop(): void;
}

/** The finished scheduled backups in a folder, oldest first. */
export function scheduledBackups(dir: string): { file: string; at: Date }[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .map((name) => ({ name, m: BACKUP_NAME.exec(name) }))
    .filter((e) => e.m)
    .map((e) => {
      const [date, time] = e.m![1]!.split('T') as [string, string];
      const [h, min, s, ms] = time.replace('Z', '').split('-');
      return { file: join(dir, e.name), at: new Date(`${date}T${h}:${min}:${s}.${ms}Z`) };
    })
    .sort((a, b) => a.at.getTime() - b.at.getTime());
}

/** Deletes all but the newest `keep` backups, and copies left half-written by a process that is gone. */
export function pruneBackups(dir: string, keep: number): string[] {
  const removed: string[] = [];
  const all = scheduledBackups(dir);
  for (const { file } of all.slice(0, Math.max(0, all.length - keep))) {
    try {
      unlinkSync(file);
      removed.push(file);
    } catch {
      // removed meanwhile
    }
  }
  for (const name of readdirSync(dir)) {
    const m = PARTIAL_NAME.exec(name);
    if (!m || Number(m[1]) === process.pid || isAlive({ pid: Number(m[1]), hostname: hostname(), procStart: null })) continue;
    try {
      unlinkSync(join(dir, name));
      removed.push(join(dir, name));
    } catch {
      // removed meanwhile
    }
  }
  return removed;
}

export function startBackupSchedule(config: Config, log: BackupLogger): BackupSchedule | null {
  const dir = config.backup.dir;
  if (!dir) return null;
  if (config.databaseUrl) {
    // The data is in PostgreSQL: its own tools back it up, not a copy of a file here.
    log.warn({ dir }, 'scheduled backups copy the SQLite file; with databaseUrl set, back up PostgreSQL with pg_dump or its server-side tools instead');
    return null;
  }
  const intervalMs = config.backup.intervalSeconds * 1000;
  const abort = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<BackupResult | null> | null = null;

  const runOnce = (): Promise<BackupResult | null> => {
    running ??= (async () => {
      try {
        mkdirSync(dir, { recursive: true, mode: 0o700 });
        const result = await backupDatabase(config, join(dir, `svc-backup-${fileStamp()}.db`), { signal: abort.signal });
        const pruned = pruneBackups(dir, config.backup.keep);
        log.info(
          { backup: { path: result.path, size: result.size, schemaVersion: result.schemaVersion, durationMs: result.durationMs, pruned } },
          'scheduled backup written',
        );
        return result;
      } catch (err) {
        if (abort.signal.aborted) return null;
        log.error({ err, backupDir: dir }, 'scheduled backup failed; the next one is tried at the next interval');
        return null;
      } finally {
        running = null;
      }
    })();
    return running;
  };

  const schedule = (delayMs: number) => {
    if (abort.signal.aborted) return;
    timer = setTimeout(
      () => {
        void runOnce().then(() => schedule(intervalMs));
      },
      Math.max(0, delayMs),
    );
    timer.unref();
  };
  const newest = scheduledBackups(dir).at(-1);
  schedule(newest ? newest.at.getTime() + intervalMs - Date.now() : 0);
  log.info({ backupDir: dir, intervalSeconds: config.backup.intervalSeconds, keep: config.backup.keep }, 'scheduled backups on');

  return {
    runOnce,
    stop() {
      abort.abort();
      if (timer) clearTimeout(timer);
    },
  };
}
