import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { ConflictError } from './errors.js';

/**
 * Who holds a data folder. Every `svc serve` leaves a pid file in `<dataDir>/locks/` while it
 * runs (several servers may share a folder, so one file each), and `svc restore` one of its
 * own while it swaps the database. A file whose process is gone (killed with -9, a crash,
 * a reboot) is stale and ignored: liveness is the process itself, not the file.
 */
export interface LockHolder {
  pid: number;
  hostname: string;
  startedAt: string;
  /** Start time of the process in clock ticks since boot (Linux), to tell a reused pid apart. */
  procStart: string | null;
  /** The server's public URL, once it knows it (a server's own port may be picked at start: --port 0). */
  publicUrl: string | null;
  file: string;
}

const SERVE_FILE = /^serve-([0-9]+)\.json$/;
const RESTORE_FILE = 'restore.json';

export function locksDir(dataDir: string): string {
  return join(dataDir, 'locks');
}

function procStart(pid: number): string | null {
  try {
    // Field 22 of /proc/PID/stat; the command name (field 2) may hold spaces, so count after ')'.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

function readHolder(file: string): LockHolder | null {
  try {
    const parsed = JSON.parse(readFileSync(file, 'utf8')) as Partial<LockHolder>;
    if (typeof parsed.pid !== 'number' || !Number.isInteger(parsed.pid) || parsed.pid <= 0) return null;
    return {
      pid: parsed.pid,
      hostname: String(parsed.hostname ?? ''),
      startedAt: String(parsed.startedAt ?? ''),
      procStart: parsed.procStart ?? null,
      publicUrl: typeof parsed.publicUrl === 'string' ? parsed.publicUrl : null,
      file,
    };
  } catch {
    return null; // half-written or removed meanwhile: nobody we can identify
  }
}

/** True while the process that wrote the file still runs (unknowable for another host: assumed alive). */
export function isAlive(holder: Pick<LockHolder, 'pid' | 'hostname' | 'procStart'>): boolean {
  if (holder.hostname && holder.hostname !== hostname()) return true;
  try {
    process.kill(holder.pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  const now = procStart(holder.pid);
  return !(holder.procStart && now && now !== holder.procStart);
}

function writeHolder(file: string, extra: { publicUrl?: string } = {}): void {
  const content = JSON.stringify({ pid: process.pid, hostname: hostname(), startedAt: new Date().toISOString(), procStart: procStart(process.pid), ...extra });
  const fd = openSync(file, 'w', 0o600);
  try {
    writeSync(fd, content);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function removeQuietly(file: string): void {
  try {
    unlinkSync(file);
  } catch {
    // already gone
  }
}

/** The servers running on this data folder now; `stale` are pid files left by processes that are gone. */
export function serverHolders(dataDir: string): { live: LockHolder[]; stale: LockHolder[] } {
  const dir = locksDir(dataDir);
  const live: LockHolder[] = [];
  const stale: LockHolder[] = [];
  if (!existsSync(dir)) return { live, stale };
  for (const name of readdirSync(dir)) {
    if (!SERVE_FILE.test(name)) continue;
    const holder = readHolder(join(dir, name));
    if (!holder) continue;
    (holder.pid !== process.pid && isAlive(holder) ? live : stale).push(holder);
  }
  return { live, stale };
}

function liveRestore(dataDir: string): LockHolder | null {
  const holder = readHolder(join(locksDir(dataDir), RESTORE_FILE));
  return holder && holder.pid !== process.pid && isAlive(holder) ? holder : null;
}

export interface HeldLock {
  readonly file: string;
  release(): void;
  /** Adds the server's public URL to its pid file, for CLI processes on the same folder (cli/io.ts). */
  notePublicUrl(publicUrl: string): void;
}

function hold(file: string): HeldLock {
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    process.off('exit', release);
    removeQuietly(file);
  };
  // Removed on every ordinary exit, including process.exit(); a kill -9 leaves a stale file.
  process.on('exit', release);
  return { file, release, notePublicUrl: (publicUrl) => !released && writeHolder(file, { publicUrl }) };
}

/**
 * Marks this process as a server of the data folder. Refuses while a restore is swapping the
 * database. The pid file is written before the restore lock is checked, and restore does the
 * opposite, so of a server and a restore starting together at least one sees the other.
 */
export function acquireServeLock(dataDir: string): HeldLock {
  mkdirSync(locksDir(dataDir), { recursive: true, mode: 0o700 });
  const file = join(locksDir(dataDir), `serve-${process.pid}.json`);
  writeHolder(file);
  const restoring = liveRestore(dataDir);
  if (restoring) {
    removeQuietly(file);
    throw new ConflictError('restore_in_progress', `A restore into ${dataDir} is in progress (pid ${restoring.pid}); start the server when it has finished`);
  }
  return hold(file);
}

function describeServers(dataDir: string, live: LockHolder[]): string {
  const who = live.map((h) => `pid ${h.pid}${h.hostname !== hostname() ? ` on ${h.hostname}` : ''}`).join(', ');
  return `A server is running on ${dataDir} (${who}); stop it first (its lock files are in ${locksDir(dataDir)})`;
}

/** Refuses when a server holds the data folder. */
export function assertNoServer(dataDir: string): void {
  const { live } = serverHolders(dataDir);
  if (live.length) throw new ConflictError('server_running', describeServers(dataDir, live));
}

/** Takes the data folder for a restore: no server may run, and no other restore. */
export function acquireRestoreLock(dataDir: string): HeldLock {
  mkdirSync(locksDir(dataDir), { recursive: true, mode: 0o700 });
  const file = join(locksDir(dataDir), RESTORE_FILE);
  const other = liveRestore(dataDir);
  if (other) throw new ConflictError('restore_in_progress', `Another restore into ${dataDir} is running (pid ${other.pid})`);
  writeHolder(file);
  const lock = hold(file);
  try {
    assertNoServer(dataDir);
  } catch (err) {
    lock.release();
    throw err;
  }
  return lock;
}
