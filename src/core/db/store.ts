import { AsyncLocalStorage } from 'node:async_hooks';
import { dirname, resolve } from 'node:path';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { closeDatabase, keepSqliteTempFilesIn, openDatabase, type Db, type SynchronousLevel } from './connection.js';
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
  /**
   * Outside a transaction: the reading handle. Inside one (in the same async call chain) it
   * is that transaction's handle, so code that was handed the outer context still reads its
   * own writes and writes into the transaction.
   */
  readonly db: Db;
  transaction<T>(fn: (tx: Db) => Promise<T>, opts?: TransactionOptions): Promise<T>;
  close(): Promise<void>;
}

export interface TransactionOptions {
  /**
   * 'read committed' on PostgreSQL (SQLite's transactions are serializable whatever is
   * asked): for a transaction whose every rule a unique index or a row lock enforces, such
   * as creating a contact, which bumps the workspace's contact counter. At SERIALIZABLE a
   * burst of them fails on that one row again and again; at READ COMMITTED they queue on its
   * lock, and two for one new email still make one contact (the unique index refuses the
   * second, which is run again and finds the first). Ignored inside another transaction.
   */
  isolation?: 'read committed';
}

/** SQLite's store adds what its synchronous hot paths (group commits) need. */
export interface SqliteStore extends Store {
  readonly dialect: 'sqlite';
  /** The connection transactions write through (the hot paths prepare their statements on it). */
  readonly writer: Db;
  /** The file, for the engine's worker threads, which open their own store on it. */
  readonly file: string;
  /**
   * Runs fn alone on the writer connection, under the queue and the write lock, without
   * beginning a transaction: fn runs its own (a group commit with its own recovery) and
   * must end it before it returns. One await per batch, none per row.
   */
  exclusive<T>(fn: (writer: Db) => T): Promise<T>;
}

export function isSqliteStore(store: Store): store is SqliteStore {
  return store.dialect === 'sqlite';
}

/** PostgreSQL's store adds its pool, for the hot paths that run their own statements. */
export interface PgStore extends Store {
  readonly dialect: 'pg';
  readonly pool: pg.Pool;
}

/**
 * The handle services use as ctx.db: each property is looked up on the open transaction of
 * the current call chain when there is one, else on the reading handle.
 */
function routed(store: () => Store, reader: Db): Db {
  return new Proxy(reader, {
    get(target, prop) {
      const open = current.getStore();
      const handle = open?.active && open.store === store() ? open.tx : target;
      const value = Reflect.get(handle, prop, handle);
      return typeof value === 'function' ? value.bind(handle) : value;
    },
  });
}

/** The open transaction of the current async call chain, per store. */
interface Open {
  store: Store;
  tx: Db;
  savepoints: number;
  /**
   * False once the transaction ended: a timer or promise started inside it and still running
   * afterwards inherits this context, and must then neither write through the ended
   * transaction's connection nor take it for an open one to nest in.
   */
  active: boolean;
}
const current = new AsyncLocalStorage<Open>();

function openOf(store: Store): Open | undefined {
  const open = current.getStore();
  return open?.store === store && open.active ? open : undefined;
}

/** Runs fn as the body of a transaction on tx: ctx.db inside it routes there until it ends. */
async function asBody<T>(store: Store, tx: Db, fn: (tx: Db) => Promise<T>): Promise<T> {
  const open: Open = { store, tx, savepoints: 0, active: true };
  try {
    return await current.run(open, () => fn(tx));
  } finally {
    open.active = false;
  }
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

/** A transaction waiting for its group (see openSqliteStore). */
interface Pending {
  fn: (tx: Db) => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

/** Transactions committed together at most (one fsync for all of them). */
const MAX_GROUP = 256;

/**
 * SQLite: one writer connection, one transaction at a time, and group commit. Transactions
 * that arrive while another group is committing (or in the same turn of the event loop) run
 * one after another inside one BEGIN ... COMMIT, each in a savepoint of its own: a failing
 * one is rolled back alone, and every one settles only after the group's COMMIT, so with
 * synchronous=FULL a settled transaction is on disk. Many requests then share one fsync.
 */
export function openSqliteStore(file: string, opts: { synchronous?: SynchronousLevel } = {}): SqliteStore {
  if (file !== ':memory:' && file !== '') keepSqliteTempFilesIn(dirname(resolve(file)));
  const writer = openDatabase(file, opts);
  const reader = openDatabase(file, opts);
  reader.$client.pragma('query_only = ON');
  const queue = new AsyncQueue();
  const exec = async (statement: string) => writer.$client.exec(statement);
  const client = writer.$client;
  const pending: Pending[] = [];
  let scheduled = false;
  let savepoints = 0;

  const runGroup = async (group: Pending[]): Promise<void> => {
    const lock = processWriteLock();
    lock?.acquire();
    const settled: (() => void)[] = [];
    try {
      try {
        client.exec('BEGIN IMMEDIATE');
      } catch (err) {
        for (const p of group) p.reject(err);
        return;
      }
      for (const p of group) {
        const name = `svc_tx_${++savepoints}`;
        client.exec(`SAVEPOINT ${name}`);
        try {
          const value = await asBody(store, writer, p.fn);
          client.exec(`RELEASE SAVEPOINT ${name}`);
          settled.push(() => p.resolve(value));
        } catch (err) {
          // Ends this one only; SQLite may have rolled the whole transaction back itself (a
          // full disk does): then the group is over and the rest are refused with it.
          if (!client.inTransaction) {
            for (const each of group) each.reject(err);
            return;
          }
          client.exec(`ROLLBACK TO SAVEPOINT ${name}`);
          client.exec(`RELEASE SAVEPOINT ${name}`);
          settled.push(() => p.reject(err));
        }
      }
      try {
        client.exec('COMMIT');
      } catch (err) {
        if (client.inTransaction) client.exec('ROLLBACK');
        for (const p of group) p.reject(err);
        return;
      }
      for (const settle of settled) settle();
    } finally {
      lock?.release();
    }
  };

  const drain = () => {
    if (scheduled) return;
    scheduled = true;
    // The next turn: transactions started by the requests of this one join the group.
    setImmediate(() => {
      scheduled = false;
      const group = pending.splice(0, MAX_GROUP);
      if (!group.length) return;
      void queue
        .run(() => runGroup(group))
        .catch((err: unknown) => {
          // Unexpected (a SAVEPOINT the connection refused, a closed store): end the
          // transaction and refuse the whole group; none of it was committed.
          if (client.open && client.inTransaction) client.exec('ROLLBACK');
          for (const p of group) p.reject(err);
        })
        .finally(() => {
          if (pending.length) drain();
        });
    });
  };

  const store: SqliteStore = {
    dialect: 'sqlite',
    db: routed(() => store, reader),
    writer,
    file,
    exclusive(fn) {
      return queue.run(async () => {
        const lock = processWriteLock();
        lock?.acquire();
        try {
          return fn(writer);
        } finally {
          lock?.release();
        }
      });
    },
    transaction<T>(fn: (tx: Db) => Promise<T>): Promise<T> {
      const open = openOf(store);
      if (open) return inSavepoint(open, exec, fn);
      return new Promise<T>((resolve, reject) => {
        pending.push({ fn, resolve: resolve as (value: unknown) => void, reject });
        drain();
      });
    },
    async close() {
      while (pending.length) await queue.run(() => runGroup(pending.splice(0, MAX_GROUP)));
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
 * (ids stay far below 2^53), and json (and jsonb) as its text, which the JSON columns of schema.ts parse.
 */
function setPgTypes(): void {
  if (typesSet) return;
  typesSet = true;
  pg.types.setTypeParser(pg.types.builtins.INT8, (v: string) => Number(v));
  pg.types.setTypeParser(pg.types.builtins.JSON, (v: string) => v);
  pg.types.setTypeParser(pg.types.builtins.JSONB, (v: string) => v);
}

/** SQLSTATEs after which a serializable transaction may simply run again. */
const RETRYABLE = new Set(['40001', '40P01']);
/**
 * Tries at most. Transactions that update one hot row (a workspace's contact counter, kept
 * by a trigger) conflict with each other at SERIALIZABLE, and only one of them commits per
 * round: under a burst of creations (120 new contacts at once from webhooks) a transaction
 * may need many rounds, so the back-off grows (with jitter) up to 100 ms a try.
 */
const MAX_ATTEMPTS = 40;
/**
 * A unique violation in a transaction that read first (read, then insert when absent): run
 * again, it reads the row the other transaction committed and takes its own path (a 409, or
 * the existing row). A few tries only: a violation with no such read would repeat.
 */
const UNIQUE_VIOLATION = '23505';
const MAX_UNIQUE_RETRIES = 2;

/**
 * Whether a PostgreSQL transaction failed only because others wrote what it read or was about
 * to write (a unique violation, a serialization failure or a deadlock) after the store's own
 * retries: the same work in smaller transactions can succeed.
 */
export function isWriteConflict(err: unknown): boolean {
  const state = sqlState(err);
  return state === UNIQUE_VIOLATION || (state !== undefined && RETRYABLE.has(state));
}

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

export function openPgStore(url: string, opts: PgStoreOptions = {}): PgStore {
  setPgTypes();
  const pool = new pg.Pool({ connectionString: url, max: opts.poolSize ?? 10, application_name: opts.applicationName ?? 'svc' });
  // An idle client that loses its connection (the server restarted) emits here; the pool drops it.
  pool.on('error', () => {});
  // A checked-out client that loses it between two queries emits on itself: its next query
  // fails and is handled there, instead of the error ending the process.
  pool.on('connect', (client) => client.on('error', () => {}));
  const db = drizzlePg(pool) as unknown as Db;
  const store: PgStore = {
    dialect: 'pg',
    pool,
    db: routed(() => store, db),
    async transaction(fn, opts) {
      const open = openOf(store);
      if (open) return inSavepoint(open, (s) => (open.tx as unknown as { execute(q: string): Promise<unknown> }).execute(s), fn);
      let uniqueRetries = 0;
      for (let attempt = 1; ; attempt++) {
        try {
          return await (db as unknown as PgTransactional).transaction((tx) => asBody(store, tx as Db, fn), {
            isolationLevel: opts?.isolation ?? 'serializable',
          });
        } catch (err) {
          const state = sqlState(err) ?? '';
          if (state === UNIQUE_VIOLATION) uniqueRetries++;
          const retry = RETRYABLE.has(state) || (state === UNIQUE_VIOLATION && uniqueRetries <= MAX_UNIQUE_RETRIES);
          if (attempt >= MAX_ATTEMPTS || !retry) throw err;
          // Back off a little, more each time, so that the transactions that collided do not collide again.
          await new Promise((r) => setTimeout(r, Math.random() * Math.min(100, 2 ** attempt)));
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
  transaction<T>(fn: (tx: unknown) => Promise<T>, config: { isolationLevel: 'serializable' | 'read committed' }): Promise<T>;
}
