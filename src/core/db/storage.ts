import { statfsSync } from 'node:fs';

/**
 * Below this many free bytes an I/O error of SQLite is taken for a full disk, and a disk
 * found full is not taken for writable again: a small write can still fit in room SQLite
 * had already allocated (the WAL's tail) while anything bigger fails.
 */
const NEARLY_FULL_BYTES = 8 * 1024 * 1024;
/** While the disk stays full, the log says so again after this long, not on every failed write. */
const LOG_EVERY_MS = 60_000;

export interface StorageLog {
  error(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

function freeBytes(dir: string): number | undefined {
  try {
    const s = statfsSync(dir);
    return Number(s.bavail) * Number(s.bsize);
  } catch {
    return undefined;
  }
}

/**
 * Whether a failed write failed for lack of space: SQLite's SQLITE_FULL, a file-system
 * ENOSPC, or an SQLite I/O error (a failed WAL append or fsync) while the data folder's
 * file system has next to no room left.
 */
export function isStorageFull(err: unknown, dataDir: string): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return false;
  if (code === 'SQLITE_FULL' || code === 'ENOSPC' || code === 'EDQUOT') return true;
  if (!code.startsWith('SQLITE_IOERR')) return false;
  const free = freeBytes(dataDir);
  return free !== undefined && free < NEARLY_FULL_BYTES;
}

/**
 * Whether the data folder takes writes. A write that fails for lack of space marks it
 * full (and /readyz not ready); the next write that succeeds with some room free on the
 * disk marks it writable again. The
 * log says so when it fills, once a minute while it stays full, and when it recovers.
 */
export class StorageHealth {
  private fullSince: number | null = null;
  private lastLogged = 0;
  private failures = 0;

  constructor(
    private readonly dataDir: string,
    private readonly log: StorageLog,
  ) {}

  get full(): boolean {
    return this.fullSince !== null;
  }

  /** Notes a failed write; true when it failed for lack of space. */
  noteFailure(err: unknown): boolean {
    if (!isStorageFull(err, this.dataDir)) return false;
    const now = Date.now();
    this.failures++;
    if (this.fullSince === null) this.fullSince = now;
    if (now - this.lastLogged >= LOG_EVERY_MS) {
      this.lastLogged = now;
      const free = freeBytes(this.dataDir);
      this.log.error(
        {
          code: (err as { code?: string }).code,
          dataDir: this.dataDir,
          freeBytes: free,
          failedWrites: this.failures,
          fullSince: new Date(this.fullSince).toISOString(),
        },
        'the disk of the data folder is full: writes fail and are answered 503 storage_full; free some space and intake resumes by itself',
      );
      this.failures = 0;
    }
    return true;
  }

  /** Notes a write that committed: the disk takes writes again, once it has room again. */
  noteSuccess(): void {
    if (this.fullSince === null) return;
    if ((freeBytes(this.dataDir) ?? Infinity) < NEARLY_FULL_BYTES) return;
    this.log.info({ dataDir: this.dataDir, fullForMs: Date.now() - this.fullSince }, 'the data folder takes writes again');
    this.fullSince = null;
    this.lastLogged = 0;
    this.failures = 0;
  }
}
