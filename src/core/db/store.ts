import { AsyncLocalStorage } from 'node:async_hooks';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { closeDatabase, openDatabase, type Db, type SynchronousLevel } from './connection.js';
import { processWriteLock } from './writeLock.js';

/**
 * Where svc keeps its data: embedded SQLite (the default) or PostgreSQL. Services see the same
 * surface on both (docs/stores.md): a drizzle handle typed as SQLite's, built from the one
 * table description in schema.ts, and transactions that behave alike.
 *
 * - `db` reads outside a transaction. On SQLite it is a second connection that cannot write
 *   (query_only), so it never sees what an open transaction has not committed, and a stray
 *   write outside a transaction fails loudly instead of slipping into someone else's.
 * - `transaction(fn)` runs every write. Transactions are serializable on both stores:
 *   SQLite runs one at a time (an async queue in this thread, the write lock across threads,
 *   SQLite's own lock across processes); PostgreSQL runs them at SERIALIZABLE and runs fn
 *   again when the server reports a serialization failure or deadlock, so fn must do
 *   nothing but database work. A transaction inside another becomes a savepoint.
 */
export interface Store {
  readonly dialect: 'sqlite' | 'pg';
  readonly db: Db;
  transaction<T>(fn: (tx: Db) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/** The open transaction of the current async call chain, per store. */
interface Open {
  store: Store;
  tx: Db;
  savepoints: number;
}
const current = new AsyncLocalStorage<Open>();

function openOf(store: Store): Open | undefined {
  const open = current.getStore();
  return open?.store === store ? open : undefined;
}

/** A FIFO lock for async callers: the holder may await while the others wait their turn. */
class AsyncQueue {
  private tail: Promise<void> = Promise.resolve();

  async run<T>(fn: () => Promise<T>): Promise<T> {
    const previous = this.tail;
    let release!: () => void;
    this.tail = new Promise<void>((r) => {
      release = r;
    });
    await previous;
    try {
      return await fn();
    } finally {
      release();
    }
  }
}

async function inSavepoint<T>(open: Open, exec: (statement: string) => Promise<unknown>, fn: (tx: Db) => Promise<T>): Promise<T> {
  const name = `svc_sp_${++open.savepoints}`;
  await exec(`SAVEPOINT ${name}`);
  try {
    const result = await fn(open.tx);
    await exec(`RELEASE SAVEPOINT ${name}`);
    return result;
  } catch (err) {
    await exec(`ROLLBACK TO SAVEPOINT ${name}`);
    await exec(`RELEASE SAVEPOINT ${name}`);
    throw err;
  }
}

export function openSqliteStore(file: string, opts: { synchronous?: SynchronousLevel } = {}): Store {
  const writer = openDatabase(file, opts);
  const reader = openDatabase(file, opts);
  reader.$client.pragma('query_only = ON');
  const queue = new AsyncQueue();
  const exec = async (statement: string) => writer.$client.exec(statement);
  const store: Store = {
    dialect: 'sqlite',
    db: reader,
    transaction(fn) {
      const open = openOf(store);
      if (open) return inSavepoint(open, exec, fn);
      return queue.run(async () => {
        const lock = processWriteLock();
        lock?.acquire();
        try {
          writer.$client.exec('BEGIN IMMEDIATE');
          try {
            const result = await current.run({ store, tx: writer, savepoints: 0 }, () => fn(writer));
            writer.$client.exec('COMMIT');
            return result;
          } catch (err) {
            if (writer.$client.inTransaction) writer.$client.exec('ROLLBACK');
            throw err;
          }
        } finally {
          lock?.release();
        }
      });
    },
    async close() {
      await queue.run(async () => {
        closeDatabase(reader);
        closeDatabase(writer);
      });
    },
  };
  return store;
}

let typesSet = false;

/**
 * The pg driver's readers made to match SQLite's values: bigint (ids, counts) as numbers
 * (ids stay far below 2^53), and jsonb as its text, which the JSON columns of schema.ts parse.
 */
function setPgTypes(): void {
  if (typesSet) return;
  typesSet = true;
  pg.types.setTypeParser(pg.types.builtins.INT8, (v: string) => Number(v));
  pg.types.setTypeParser(pg.types.builtins.JSONB, (v: string) => v);
}

/** SQLSTATEs after which a serializable transaction may simply run again. */
const RETRYABLE = new Set(['40001', '40P01']);
const MAX_ATTEMPTS = 10;

function sqlState(err: unknown): string | undefined {
  for (let e: unknown = err; e && typeof e === 'object'; e = (e as { cause?: unknown }).cause) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code;
  }
  return undefined;
}

export interface PgStoreOptions {
  /** Connections this node keeps open at most. */
  poolSize?: number;
  applicationName?: string;
}

export function openPgStore(url: string, opts: PgStoreOptions = {}): Store {
  setPgTypes();
  const pool = new pg.Pool({ connectionString: url, max: opts.poolSize ?? 10, application_name: opts.applicationName ?? 'svc' });
  // An idle client that loses its connection (the server restarted) emits here; the pool drops it.
  pool.on('error', () => {});
  const db = drizzlePg(pool) as unknown as Db;
  const store: Store = {
    dialect: 'pg',
    db,
    async transaction(fn) {
      const open = openOf(store);
      if (open) return inSavepoint(open, (s) => (open.tx as unknown as { execute(q: string): Promise<unknown> }).execute(s), fn);
      for (let attempt = 1; ; attempt++) {
        try {
          return await (db as unknown as PgTransactional).transaction((tx) => current.run({ store, tx: tx as Db, savepoints: 0 }, () => fn(tx as Db)), {
            isolationLevel: 'serializable',
          });
        } catch (err) {
          if (attempt >= MAX_ATTEMPTS || !RETRYABLE.has(sqlState(err) ?? '')) throw err;
          // Back off a little, more each time, so that the transactions that collided do not collide again.
          await new Promise((r) => setTimeout(r, Math.random() * 5 * attempt));
        }
      }
    },
    async close() {
      await pool.end();
    },
  };
  return store;
}

interface PgTransactional {
  transaction<T>(fn: (tx: unknown) => Promise<T>, config: { isolationLevel: 'serializable' }): Promise<T>;
}
