import { pgMigrationStatus } from '../db/pgMigrate.js';
import { existsSync, statSync, statfsSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { configPath, ConfigError, loadConfig, resolveDataDir, type Config } from '../config.js';
import { drizzle } from 'drizzle-orm/better-sqlite3';
import type { Db } from '../db/connection.js';
import { DatabaseTooNewError, migrationStatus } from '../db/migrate.js';
import { serverHolders } from '../serverLock.js';
import pg from 'pg';
import { liveNodes, undecryptableSecret } from '../cluster.js';
import { openPgStore } from '../db/store.js';
import { scheduledBackups } from './backupSchedule.js';

/**
 * `svc doctor`: what is wrong with a data folder, and what to do about it. Every check
 * reads; none repairs. A FAIL is something that breaks svc or exposes its secrets now; a
 * WARN is something to look at before it does.
 */

export type CheckStatus = 'OK' | 'WARN' | 'FAIL';

export interface Check {
  name: string;
  status: CheckStatus;
  detail: string;
  /** What to do, for WARN and FAIL. */
  fix?: string;
}

export interface DoctorReport {
  dataDir: string;
  ok: boolean;
  checks: Check[];
}

/** Above this size the integrity check is PRAGMA quick_check (O(N) instead of O(N log N), skips index contents). */
export const FULL_INTEGRITY_MAX_BYTES = 1024 * 1024 * 1024;
const FAIL_FREE_BYTES = 64 * 1024 * 1024;
const WARN_FREE_BYTES = 1024 * 1024 * 1024;

function mb(bytes: number): string {
  return bytes >= 1024 ** 3 ? `${(bytes / 1024 ** 3).toFixed(1)} GB` : `${(bytes / 1024 ** 2).toFixed(1)} MB`;
}

function octal(mode: number): string {
  return `0${(mode & 0o777).toString(8)}`;
}

function sizeOf(file: string): number {
  try {
    return statSync(file).size;
  } catch {
    return 0;
  }
}

/** The folder 0700, the files holding secrets or data 0600, all owned by the user running svc. */
function permissionChecks(dataDir: string): Check[] {
  const dirMode = statSync(dataDir).mode;
  const files = ['config.json', 'svc.db', 'svc.db-wal', 'svc.db-shm'].map((f) => join(dataDir, f)).filter((f) => existsSync(f));
  const worldOpen: string[] = [];
  const groupOpen: string[] = [];
  const note = (path: string, mode: number) => {
    if (mode & 0o007) worldOpen.push(`${path} (${octal(mode)})`);
    else if (mode & 0o070) groupOpen.push(`${path} (${octal(mode)})`);
  };
  note(dataDir, dirMode);
  for (const f of files) note(f, statSync(f).mode);
  const chmod = `chmod 700 ${dataDir}${files.length ? ` && chmod 600 ${files.join(' ')}` : ''}`;
  const checks: Check[] = [];
  if (worldOpen.length) {
    checks.push({
      name: 'permissions',
      status: 'FAIL',
      detail: `readable by every user: ${[...worldOpen, ...groupOpen].join(', ')}; they hold the secrets and every contact`,
      fix: chmod,
    });
  } else if (groupOpen.length) {
    checks.push({ name: 'permissions', status: 'WARN', detail: `open to the group: ${groupOpen.join(', ')}`, fix: chmod });
  } else {
    checks.push({ name: 'permissions', status: 'OK', detail: `folder ${octal(dirMode)}, ${files.length} file(s) 0600` });
  }
  const uid = process.getuid?.();
  if (uid !== undefined) {
    const others = [dataDir, ...files].filter((f) => statSync(f).uid !== uid);
    checks.push(
      others.length
        ? {
            name: 'owner',
            status: 'WARN',
            detail: `not owned by the user running svc (uid ${uid}): ${others.join(', ')}`,
            fix: `chown -R ${uid} ${dataDir} (or run svc as the owner)`,
          }
        : { name: 'owner', status: 'OK', detail: `uid ${uid}` },
    );
  }
  return checks;
}

function diskCheck(dataDir: string): Check {
  let free: number;
  try {
    const s = statfsSync(dataDir);
    free = Number(s.bavail) * Number(s.bsize);
  } catch (err) {
    return { name: 'disk space', status: 'WARN', detail: `cannot read the free space: ${(err as Error).message}` };
  }
  const used = sizeOf(join(dataDir, 'svc.db')) + sizeOf(join(dataDir, 'svc.db-wal'));
  const detail = `${mb(free)} free; the database takes ${mb(used)}`;
  const fix = "free some space on that disk or move the data folder (writes fail when it is full; a backup needs about the database's size again)";
  if (free < FAIL_FREE_BYTES) return { name: 'disk space', status: 'FAIL', detail, fix };
  if (free < Math.max(WARN_FREE_BYTES, 2 * used)) return { name: 'disk space', status: 'WARN', detail, fix };
  return { name: 'disk space', status: 'OK', detail };
}

function configCheck(dataDir: string, env: NodeJS.ProcessEnv, databaseUrl?: string): { check: Check; config: Config | null } {
  if (!existsSync(configPath(dataDir))) {
    return {
      check: {
        name: 'config',
        status: 'FAIL',
        detail: `${configPath(dataDir)} is missing (it holds the secrets)`,
        fix: `svc init --data-dir ${dataDir} for a new folder, or svc restore a backup (it brings the secrets)`,
      },
      config: null,
    };
  }
  try {
    const config = loadConfig({ dataDir, ...(databaseUrl ? { databaseUrl } : {}) }, env);
    return { check: { name: 'config', status: 'OK', detail: 'valid, secrets present' }, config };
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    return {
      check: { name: 'config', status: 'FAIL', detail: err.message, fix: `correct the value in ${configPath(dataDir)} or the SVC_* variable that sets it` },
      config: null,
    };
  }
}

/** Doctor only reads: a read-only connection, or a plain one where SQLite cannot open the WAL read-only. */
function openForReading(dbFile: string): Database.Database {
  for (const readonly of [true, false]) {
    const client = new Database(dbFile, { readonly, fileMustExist: true });
    try {
      client.pragma('busy_timeout = 5000');
      client.prepare('SELECT count(*) FROM sqlite_master').get();
      return client;
    } catch (err) {
      client.close();
      if (!readonly) throw err;
    }
  }
  throw new Error('unreachable');
}

function databaseChecks(dbFile: string): Check[] {
  if (!existsSync(dbFile)) {
    return [{ name: 'database', status: 'FAIL', detail: `${dbFile} is missing`, fix: 'svc serve (or svc init) creates it; or svc restore a backup' }];
  }
  const checks: Check[] = [];
  const size = sizeOf(dbFile);
  const quick = size > FULL_INTEGRITY_MAX_BYTES;
  let client: Database.Database | undefined;
  try {
    client = openForReading(dbFile);
    const rows = (
      client
        .prepare(quick ? 'PRAGMA quick_check' : 'PRAGMA integrity_check')
        .pluck()
        .all() as string[]
    ).filter((r) => r !== 'ok');
    const how = quick
      ? `quick_check (the database is ${mb(size)}; run "sqlite3 ${dbFile} 'PRAGMA integrity_check'" with the server stopped for the full check)`
      : 'integrity_check';
    checks.push(
      rows.length
        ? {
            name: 'integrity',
            status: 'FAIL',
            detail: `${how}: ${rows.slice(0, 3).join('; ')}${rows.length > 3 ? `; and ${rows.length - 3} more` : ''}`,
            fix: 'stop the server and svc restore the newest good backup',
          }
        : { name: 'integrity', status: 'OK', detail: `${how}: ok (${mb(size)})` },
    );
  } catch (err) {
    client?.close();
    checks.push({
      name: 'integrity',
      status: 'FAIL',
      detail: `SQLite cannot read ${dbFile}: ${(err as Error).message}`,
      fix: 'stop the server and svc restore the newest good backup',
    });
    return checks;
  }
  try {
    if (!client.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'svc_migrations'").get()) {
      checks.push({
        name: 'migrations',
        status: 'WARN',
        detail: 'no migration has been applied (an empty database)',
        fix: 'svc migrate (svc serve also applies them when it starts)',
      });
      return checks;
    }
    const { applied, pending } = migrationStatus(drizzle(client) as unknown as Db);
    checks.push(
      pending.length
        ? {
            name: 'migrations',
            status: 'WARN',
            detail: `${pending.length} pending: ${pending.join(', ')}`,
            fix: 'svc migrate (svc serve also applies them when it starts)',
          }
        : { name: 'migrations', status: 'OK', detail: `up to date (${applied.at(-1) ?? 'none'})` },
    );
  } catch (err) {
    if (!(err instanceof DatabaseTooNewError)) throw err;
    checks.push({ name: 'migrations', status: 'FAIL', detail: err.message, fix: 'upgrade svc to the version that migrated this database' });
  } finally {
    client.close();
  }
  return checks;
}

function serverCheck({ live, stale }: ReturnType<typeof serverHolders>): Check {
  const staleNote = stale.length ? `; ${stale.length} lock file(s) of stopped servers are ignored` : '';
  if (live.length) return { name: 'server', status: 'OK', detail: `running (pid ${live.map((h) => h.pid).join(', ')})${staleNote}` };
  return { name: 'server', status: 'OK', detail: `not running${staleNote}` };
}

function backupCheck(config: Config, serverRunning: boolean): Check {
  const dir = config.backup.dir;
  if (!dir)
    return {
      name: 'backups',
      status: 'WARN',
      detail: 'no scheduled backups (SVC_BACKUP_DIR is not set)',
      fix: 'set SVC_BACKUP_DIR (and SVC_BACKUP_INTERVAL, SVC_BACKUP_KEEP), or run svc backup --to FILE from cron',
    };
  const newest = scheduledBackups(dir).at(-1);
  if (!newest) {
    return serverRunning
      ? { name: 'backups', status: 'WARN', detail: `no backup in ${dir} yet`, fix: 'see the server log for "scheduled backup failed"' }
      : { name: 'backups', status: 'OK', detail: `${dir}: none yet (the server writes the first when it starts)` };
  }
  const ageSeconds = Math.round((Date.now() - newest.at.getTime()) / 1000);
  if (serverRunning && ageSeconds > 2 * config.backup.intervalSeconds + 60) {
    return {
      name: 'backups',
      status: 'WARN',
      detail: `the newest backup, ${newest.file}, is ${ageSeconds} s old (interval ${config.backup.intervalSeconds} s)`,
      fix: 'see the server log for "scheduled backup failed"',
    };
  }
  return { name: 'backups', status: 'OK', detail: `newest ${newest.file} (${ageSeconds} s old)` };
}

async function nodesOn(url: string): Promise<{ node: string; since: string }[]> {
  const client = new pg.Client({ connectionString: url, application_name: 'svc doctor' });
  await client.connect();
  try {
    return await liveNodes(client);
  } finally {
    await client.end();
  }
}

function describeNodes(nodes: { node: string; since: string }[]): string {
  if (!nodes.length) return 'no svc serve node is serving it';
  return `${nodes.length} node${nodes.length === 1 ? '' : 's'} serving it: ${nodes.map((n) => `${n.node} (since ${n.since})`).join(', ')}`;
}

/** PostgreSQL (databaseUrl set): the server answers, and its schema is this build's, and which nodes serve it. */
async function pgDatabaseChecks(url: string): Promise<Check[]> {
  const where = new URL(url);
  const name = `PostgreSQL ${where.host}${where.pathname}`;
  try {
    const { applied, pending } = await pgMigrationStatus(url);
    if (!applied.length)
      return [{ name: 'database', status: 'FAIL', detail: `${name} has no svc schema`, fix: 'svc migrate (or svc init, or svc serve) creates it' }];
    const database: Check = { name: 'database', status: 'OK', detail: `${name} answers; ${describeNodes(await nodesOn(url))}` };
    if (pending.length)
      return [database, { name: 'migrations', status: 'WARN', detail: `${pending.length} pending`, fix: 'svc migrate (svc serve applies them too)' }];
    return [database, { name: 'migrations', status: 'OK', detail: `applied up to ${applied.at(-1)}` }];
  } catch (err) {
    const fix = err instanceof DatabaseTooNewError ? 'upgrade svc to the version that migrated this database' : 'start PostgreSQL, or correct SVC_DATABASE_URL';
    return [{ name: 'database', status: 'FAIL', detail: `${name}: ${(err as Error).message}`, fix }];
  }
}

/** The config's encryption key opens the newest stored secrets (svc serve refuses to start otherwise). */
async function secretsCheck(config: Config): Promise<Check> {
  let what: string | null;
  try {
    if (config.databaseUrl) {
      const store = openPgStore(config.databaseUrl, { poolSize: 1 });
      try {
        what = await undecryptableSecret(store.db, config);
      } finally {
        await store.close();
      }
    } else {
      const client = openForReading(config.dbFile);
      try {
        what = await undecryptableSecret(drizzle(client) as unknown as Db, config);
      } finally {
        client.close();
      }
    }
  } catch (err) {
    return { name: 'secrets', status: 'WARN', detail: `could not read the stored secrets: ${(err as Error).message}` };
  }
  if (what)
    return {
      name: 'secrets',
      status: 'FAIL',
      detail: `the encryption key cannot decrypt ${what}`,
      fix: 'give this node the secrets.encryptionKey (SVC_ENCRYPTION_KEY) the data was written with; svc serve refuses to start until then',
    };
  return { name: 'secrets', status: 'OK', detail: 'the encryption key opens the stored secrets' };
}

export async function runDoctor(dataDirFlag: string | undefined, env: NodeJS.ProcessEnv, databaseUrlFlag?: string): Promise<DoctorReport> {
  const dataDir = resolveDataDir(dataDirFlag, env);
  const checks: Check[] = [];
  if (!existsSync(dataDir) || !statSync(dataDir).isDirectory()) {
    checks.push({
      name: 'data folder',
      status: 'FAIL',
      detail: `${dataDir} does not exist`,
      fix: `svc init --data-dir ${dataDir} (or svc serve, or svc restore a backup into it)`,
    });
    return { dataDir, ok: false, checks };
  }
  checks.push({ name: 'data folder', status: 'OK', detail: dataDir });
  checks.push(...permissionChecks(dataDir));
  checks.push(diskCheck(dataDir));
  const { check, config } = configCheck(dataDir, env, databaseUrlFlag);
  checks.push(check);
  if (config?.databaseUrl) checks.push(...(await pgDatabaseChecks(config.databaseUrl)));
  else checks.push(...databaseChecks(config?.dbFile ?? join(dataDir, 'svc.db')));
  const databaseOk = !checks.some((c) => (c.name === 'database' || c.name === 'integrity' || c.name === 'migrations') && c.status === 'FAIL');
  if (config && databaseOk) checks.push(await secretsCheck(config));
  const holders = serverHolders(dataDir);
  checks.push(serverCheck(holders));
  if (config?.databaseUrl)
    checks.push({ name: 'backups', status: 'OK', detail: 'the data is in PostgreSQL: back it up with pg_dump (svc backup copies SQLite files only)' });
  else if (config) checks.push(backupCheck(config, holders.live.length > 0));
  return { dataDir, ok: !checks.some((c) => c.status === 'FAIL'), checks };
}
