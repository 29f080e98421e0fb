import {
  chmodSync,
  closeSync,
  copyFileSync,
  existsSync,
  fsyncSync,
  openSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join, resolve } from 'node:path';
import { Worker } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { configPath, privateDataDir, resolveDataDir, type Config } from '../config.js';
import { openDatabase } from '../db/connection.js';
import { DatabaseTooNewError, migrationStatus } from '../db/migrate.js';
import { ConflictError, ValidationError } from '../errors.js';
import { extractedFile, isExecutable } from '../runtime.js';
import { acquireRestoreLock, assertNoServer } from '../serverLock.js';
import { VERSION } from '../version.js';

/**
 * Backups of a live data folder, and restoring them.
 *
 * A backup is one SQLite file: a `VACUUM INTO` copy of svc.db (one read transaction, so it
 * is consistent and finishes under any write load, where SQLite's backup API restarts each
 * time the source changes), plus a table `svc_backup (key, value)` that names the format
 * and carries the data folder's secrets (the JWT key and the key that encrypts stored
 * credentials and signing secrets: without it a restored database cannot use them). The
 * file is written 0600 and must be kept like config.json. The copy runs in a worker thread
 * with its own connection, so a server taking a scheduled backup keeps serving meanwhile.
 */

export const BACKUP_FORMAT = 'svc-backup';
export const BACKUP_FORMAT_VERSION = 1;
const META_TABLE = 'svc_backup';
const SQLITE_MAGIC = 'SQLite format 3\0';

export interface BackupResult {
  path: string;
  size: number;
  /** The latest migration applied to the copied database (null for an empty one). */
  schemaVersion: string | null;
  migrations: number;
  createdAt: string;
  durationMs: number;
  containsSecrets: true;
}

export interface BackupProgress {
  bytesWritten: number;
  /** The size the copy will have, about (the pages in use). */
  bytesTotal: number;
}

export interface BackupOptions {
  onProgress?: (p: BackupProgress) => void;
  /** Lets the process exit while the copy runs (a server shutting down does not wait for it). */
  signal?: AbortSignal;
}

interface WorkerInput {
  driver: string;
  source: string;
  target: string;
  meta: Record<string, string>;
}

type WorkerMessage = { type: 'total'; bytes: number } | { type: 'done'; schemaVersion: string | null; migrations: number } | { type: 'error'; message: string };

/**
 * Runs in a worker thread (CommonJS, evaluated from this string so that it needs no file
 * of its own in the bundle). It copies the source, stamps the copy and syncs it to disk.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const fs = require('node:fs');
const Database = require(workerData.driver);
try {
  const src = new Database(workerData.source, { fileMustExist: true });
  try {
    src.pragma('busy_timeout = 5000');
    const pages = src.pragma('page_count', { simple: true }) - src.pragma('freelist_count', { simple: true });
    parentPort.postMessage({ type: 'total', bytes: pages * src.pragma('page_size', { simple: true }) });
    src.prepare('VACUUM INTO ?').run(workerData.target);
  } finally {
    src.close();
  }
  const copy = new Database(workerData.target, { fileMustExist: true });
  let tags = [];
  try {
    const hasMigrations = copy.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'svc_migrations'").get();
    tags = hasMigrations ? copy.prepare('SELECT tag FROM svc_migrations ORDER BY id').pluck().all() : [];
    const meta = { ...workerData.meta, schemaVersion: tags.length ? tags[tags.length - 1] : '', migrations: JSON.stringify(tags) };
    copy.pragma('journal_mode = DELETE');
    copy.pragma('synchronous = FULL');
    copy.exec('CREATE TABLE ${META_TABLE} (key TEXT PRIMARY KEY, value TEXT NOT NULL)');
    const insert = copy.prepare('INSERT INTO ${META_TABLE} (key, value) VALUES (?, ?)');
    copy.transaction(() => { for (const [k, v] of Object.entries(meta)) insert.run(k, v); })();
  } finally {
    copy.close();
  }
  const fd = fs.openSync(workerData.target, 'r+');
  try { fs.fsyncSync(fd); } finally { fs.closeSync(fd); }
  parentPort.postMessage({ type: 'done', schemaVersion: tags.length ? tags[tags.length - 1] : null, migrations: tags.length });
} catch (err) {
  parentPort.postMessage({ type: 'error', message: String(err && err.message || err) });
}
`;

function driverPath(): string {
  // The single executable extracts a bundled better-sqlite3 that loads its checked addon.
  if (isExecutable()) return extractedFile('sqlite-driver.js');
  return createRequire(import.meta.url).resolve('better-sqlite3');
}

function fsyncDir(dir: string): void {
  try {
    const fd = openSync(dir, 'r');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch {
    // some file systems cannot sync a folder; the rename is still atomic
  }
}

function removeQuietly(file: string): void {
  try {
    unlinkSync(file);
  } catch {
    // not there
  }
}

function fileSize(file: string): number {
  try {
    return statSync(file).size;
  } catch {
    return 0;
  }
}

/** The name a copy has while it is written: never mistaken for a finished backup. */
export function partialName(target: string): string {
  return `${target}.partial-${process.pid}`;
}

/**
 * Writes a consistent copy of the data folder's database, with its secrets, to `target`
 * (a new file; an existing one is refused). The file appears only once it is complete.
 */
export async function backupDatabase(config: Pick<Config, 'dbFile' | 'dataDir' | 'secrets'>, target: string, opts: BackupOptions = {}): Promise<BackupResult> {
  const started = Date.now();
  const path = resolve(target);
  if (!existsSync(config.dbFile))
    throw new ValidationError('no_database', `${config.dataDir} has no database to back up (${basename(config.dbFile)} is missing)`);
  if (existsSync(path)) throw new ConflictError('backup_exists', `${path} already exists; choose a new file name (a backup never overwrites a file)`);
  if (!existsSync(dirname(path)) || !statSync(dirname(path)).isDirectory())
    throw new ValidationError('no_such_folder', `The folder ${dirname(path)} does not exist`);
  if (dirname(path) === resolve(config.dataDir) && basename(path).startsWith('svc.db')) {
    throw new ValidationError('invalid_target', `${path} would collide with the database's own files; choose another name`);
  }

  const partial = partialName(path);
  removeQuietly(partial);
  // VACUUM INTO accepts an existing empty file, so the copy is 0600 from its first byte.
  closeSync(openSync(partial, 'wx', 0o600));
  const createdAt = new Date().toISOString();
  const meta = {
    format: BACKUP_FORMAT,
    formatVersion: String(BACKUP_FORMAT_VERSION),
    createdAt,
    svcVersion: VERSION,
    sourceDataDir: config.dataDir,
    jwtSecret: config.secrets.jwtSecret,
    encryptionKey: config.secrets.encryptionKey,
  };
  const input: WorkerInput = { driver: driverPath(), source: config.dbFile, target: partial, meta };
  try {
    const done = await new Promise<{ schemaVersion: string | null; migrations: number }>((resolveDone, reject) => {
      const worker = new Worker(WORKER_SOURCE, { eval: true, workerData: input });
      let total = 0;
      let settled = false;
      const timer = opts.onProgress ? setInterval(() => opts.onProgress!({ bytesWritten: fileSize(partial), bytesTotal: total }), 250) : undefined;
      const finish = (fn: () => void) => {
        if (settled) return;
        settled = true;
        if (timer) clearInterval(timer);
        opts.signal?.removeEventListener('abort', onAbort);
        fn();
      };
      const onAbort = () => {
        worker.unref();
        finish(() => reject(new Error('backup cancelled')));
      };
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      worker.on('message', (m: WorkerMessage) => {
        if (m.type === 'total') total = m.bytes;
        else if (m.type === 'done') finish(() => resolveDone({ schemaVersion: m.schemaVersion, migrations: m.migrations }));
        else finish(() => reject(new Error(`backup failed: ${m.message}`)));
      });
      worker.on('error', (err) => finish(() => reject(err)));
      worker.on('exit', (code) => finish(() => reject(new Error(`backup worker stopped (exit ${code}) before finishing`))));
    });
    renameSync(partial, path);
    fsyncDir(dirname(path));
    const size = fileSize(path);
    opts.onProgress?.({ bytesWritten: size, bytesTotal: size });
    return { path, size, schemaVersion: done.schemaVersion, migrations: done.migrations, createdAt, durationMs: Date.now() - started, containsSecrets: true };
  } catch (err) {
    if (!opts.signal?.aborted) removeQuietly(partial);
    throw err;
  }
}

export interface BackupInfo {
  createdAt: string;
  svcVersion: string;
  sourceDataDir: string;
  schemaVersion: string | null;
  migrations: string[];
  secrets: { jwtSecret: string; encryptionKey: string };
}

function notABackup(file: string, why: string): ValidationError {
  return new ValidationError('not_a_backup', `${file} is not a usable svc backup: ${why}`);
}

function readHeader(file: string): string {
  const fd = openSync(file, 'r');
  try {
    const buf = Buffer.alloc(16);
    const n = readSync(fd, buf, 0, 16, 0);
    return buf.subarray(0, n).toString('latin1');
  } finally {
    closeSync(fd);
  }
}

/** Reads the stamp of a backup (an open SQLite connection to it). */
function readMeta(file: string, db: Database.Database): BackupInfo {
  const table = db.prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '${META_TABLE}'`).get();
  if (!table) throw notABackup(file, 'it is an SQLite database but was not written by "svc backup"');
  const meta = Object.fromEntries((db.prepare(`SELECT key, value FROM ${META_TABLE}`).all() as { key: string; value: string }[]).map((r) => [r.key, r.value]));
  if (meta.format !== BACKUP_FORMAT) throw notABackup(file, 'its stamp names another format');
  if (Number(meta.formatVersion) > BACKUP_FORMAT_VERSION) {
    throw new ConflictError(
      'backup_too_new',
      `${file} was written in backup format ${meta.formatVersion} by svc ${meta.svcVersion}; this svc reads format ${BACKUP_FORMAT_VERSION}. Upgrade svc to restore it`,
    );
  }
  const jwtSecret = meta.jwtSecret ?? '';
  const encryptionKey = meta.encryptionKey ?? '';
  if (jwtSecret.length < 32 || encryptionKey.length < 32) throw notABackup(file, 'the secrets it should carry are missing');
  let migrations: string[] = [];
  try {
    migrations = JSON.parse(meta.migrations ?? '[]') as string[];
  } catch {
    throw notABackup(file, 'its stamp is damaged');
  }
  return {
    createdAt: meta.createdAt ?? '',
    svcVersion: meta.svcVersion ?? '',
    sourceDataDir: meta.sourceDataDir ?? '',
    schemaVersion: meta.schemaVersion || null,
    migrations,
    secrets: { jwtSecret, encryptionKey },
  };
}

export interface RestoreResult {
  dataDir: string;
  from: string;
  database: string;
  backup: { createdAt: string; svcVersion: string; sourceDataDir: string };
  schemaVersion: string | null;
  /** Migrations this svc will apply when the server next starts (the backup is older). */
  pendingMigrations: string[];
  integrity: 'ok';
  secretsRestored: true;
  /** Where the replaced database and config were put (null: the folder had none). */
  previous: { database: string | null; files: string[]; config: string | null };
  durationMs: number;
}

export type RestoreStep = 'checking' | 'integrity' | 'replacing' | 'done';

/** A timestamp that sorts and is safe in a file name: 2026-11-23T13-00-00-123Z. */
export function fileStamp(date = new Date()): string {
  return date.toISOString().replace(/[:.]/g, '-');
}

function restoreSecrets(dataDir: string, secrets: BackupInfo['secrets'], stamp: string): string | null {
  const file = configPath(dataDir);
  let current: Record<string, unknown> = {};
  let aside: string | null = null;
  if (existsSync(file)) {
    aside = `${file}.before-restore-${stamp}`;
    copyFileSync(file, aside);
    try {
      const parsed: unknown = JSON.parse(readFileSync(file, 'utf8'));
      if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) current = parsed as Record<string, unknown>;
    } catch {
      // unreadable: the copy aside keeps it; the new one gets the backup's secrets only
    }
  }
  const next = { ...current, secrets: { ...secrets } };
  const tmp = `${file}.restore-${process.pid}`;
  writeFileSync(tmp, `${JSON.stringify(next, null, 2)}\n`, { mode: 0o600 });
  renameSync(tmp, file);
  return aside;
}

/**
 * Restores a backup into a data folder (an existing one, or a new or empty one when moving
 * machines). Refuses while a server holds the folder, a damaged file, and a backup of a
 * newer schema; the database it replaces is kept aside under a timestamped name, and so is
 * config.json, whose secrets that database needs.
 */
export function restoreBackup(
  dataDirFlag: string | undefined,
  env: NodeJS.ProcessEnv,
  file: string,
  onStep?: (step: RestoreStep, detail: string) => void,
): RestoreResult {
  const started = Date.now();
  const dataDir = resolveDataDir(dataDirFlag, env);
  const from = resolve(file);
  if (!existsSync(from)) throw new ValidationError('no_such_file', `${from} does not exist`);
  if (!statSync(from).isFile()) throw notABackup(from, 'it is not a file');
  if (readHeader(from) !== SQLITE_MAGIC) throw notABackup(from, 'it is not an SQLite database');
  const existed = existsSync(dataDir);
  if (existed) assertNoServer(dataDir); // early, before copying a large file
  privateDataDir(dataDir);
  let restored = false;

  const stamp = fileStamp();
  const dbFile = join(dataDir, 'svc.db');
  const staged = join(dataDir, `svc.db.restoring-${process.pid}`);
  const lock = acquireRestoreLock(dataDir);
  try {
    onStep?.('checking', `copying ${from}`);
    removeQuietly(staged);
    closeSync(openSync(staged, 'wx', 0o600));
    copyFileSync(from, staged);
    // copyFile gives the copy the backup's mode (0644 after a `cp`, say): the database is the
    // owner's alone, whatever the file it came from.
    chmodSync(staged, 0o600);
    let info: BackupInfo;
    let pending: string[];
    let client: Database.Database | undefined;
    try {
      try {
        client = new Database(staged, { fileMustExist: true });
        info = readMeta(from, client);
      } catch (err) {
        if (err instanceof ValidationError || err instanceof ConflictError) throw err;
        throw notABackup(from, `SQLite cannot read it (${(err as Error).message})`);
      }
      onStep?.('integrity', 'checking integrity (PRAGMA integrity_check)');
      let problems: string[];
      try {
        problems = (client.prepare('PRAGMA integrity_check').pluck().all() as string[]).filter((r) => r !== 'ok');
      } catch (err) {
        problems = [(err as Error).message];
      }
      if (problems.length)
        throw notABackup(
          from,
          `the integrity check failed (${problems.slice(0, 3).join('; ')}${problems.length > 3 ? `; and ${problems.length - 3} more` : ''})`,
        );
      client.exec(`PRAGMA secure_delete = ON; DROP TABLE ${META_TABLE};`);
      client.close();
      client = undefined;
      const db = openDatabase(staged);
      try {
        pending = migrationStatus(db).pending;
      } catch (err) {
        if (err instanceof DatabaseTooNewError) {
          throw new ConflictError(
            'backup_too_new',
            // Named by the database's own migrations, not the backup's label of them.
            `${from} holds a schema newer than this svc knows (its migrations ${err.unknown.join(', ')} are unknown here); restore it with a newer svc`,
          );
        }
        throw err;
      } finally {
        db.$client.close();
      }
    } finally {
      client?.close();
    }

    onStep?.('replacing', `replacing ${dbFile}`);
    const previous: RestoreResult['previous'] = { database: null, files: [], config: null };
    if (existsSync(dbFile)) previous.database = `${dbFile}.before-restore-${stamp}`;
    for (const suffix of ['', '-wal', '-shm', '-journal']) {
      if (!existsSync(dbFile + suffix)) continue;
      const aside = `${dbFile}.before-restore-${stamp}${suffix}`;
      renameSync(dbFile + suffix, aside);
      previous.files.push(aside);
    }
    renameSync(staged, dbFile);
    previous.config = restoreSecrets(dataDir, info.secrets, stamp);
    fsyncDir(dataDir);
    onStep?.('done', `restored ${dbFile}`);
    restored = true;
    return {
      dataDir,
      from,
      database: dbFile,
      backup: { createdAt: info.createdAt, svcVersion: info.svcVersion, sourceDataDir: info.sourceDataDir },
      schemaVersion: info.schemaVersion,
      pendingMigrations: pending,
      integrity: 'ok',
      secretsRestored: true,
      previous,
      durationMs: Date.now() - started,
    };
  } finally {
    removeQuietly(staged);
    removeQuietly(`${staged}-wal`);
    removeQuietly(`${staged}-shm`);
    lock.release();
    // A refused restore into a folder it made leaves none behind (a later svc serve would
    // otherwise take that empty folder for a new one and start afresh there).
    if (!restored && !existed) rmSync(dataDir, { recursive: true, force: true });
  }
}
