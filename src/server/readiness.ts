import type { WriteBatcher } from '../core/db/batcher.js';
import { sql } from 'drizzle-orm';
import { execute, storeMigrationStatus } from '../core/db/dialect.js';
import type { StorageHealth } from '../core/db/storage.js';
import { isSqliteStore, type Store } from '../core/db/store.js';
import type { SharedRedis } from '../core/redis.js';
import type { Engine } from '../engine/scheduler.js';
import type { App } from './app.js';
import { problem, sendProblem } from './plugins/errors.js';

/**
 * The write check: the newest migration's row changed and changed back, in one transaction.
 * Setting a value to itself is no write on SQLite (it leaves a page that did not change alone,
 * and commits nothing); this dirties the page, so the commit writes it as any write would.
 */
const LAST_MIGRATION = 'WHERE id = (SELECT max(id) FROM svc_migrations)';
const TOUCH = [
  `UPDATE svc_migrations SET applied_at = applied_at || '~' ${LAST_MIGRATION}`,
  `UPDATE svc_migrations SET applied_at = substr(applied_at, 1, length(applied_at) - 1) ${LAST_MIGRATION}`,
];
/**
 * A write check that succeeded this recently answers for the probes that follow, and probes
 * arriving while one is under way wait for it: /readyz is public, and a flood of it must not
 * be a flood of writes (on PostgreSQL, serializable transactions on one row, each holding a
 * connection of the pool). A failed check is not reused: the next probe writes again.
 */
const WRITE_CHECK_REUSE_MS = 1_000;

export interface ReadinessReport {
  ready: boolean;
  /** Why not, as a problem code: starting, shutting_down, storage_full or not_ready. */
  code: 'starting' | 'shutting_down' | 'storage_full' | 'not_ready' | null;
  detail: string;
  checks: {
    migrations: 'applied' | 'pending' | 'unknown';
    engine: 'up' | 'down' | 'off';
    storage: 'ok' | 'full' | 'failing';
    redis: 'up' | 'down' | 'off';
  };
}

/**
 * What GET /readyz answers: ready only once the app has started, every migration this
 * binary carries is applied, the run engine's pool is up (when this node runs the engine)
 * and a write through the group commit succeeds; not ready again from the moment the app
 * starts closing. The parts (batcher, engine) are attached as buildApp creates them.
 */
export class Readiness {
  private started = false;
  private closing = false;
  private migrated = false;
  private batcher: WriteBatcher | undefined;
  private engine: Engine | undefined;
  private attached = false;
  private touch: { run(): unknown }[] | undefined;
  /** When a write check last succeeded (performance.now()), and the one under way. */
  private wroteAt = Number.NEGATIVE_INFINITY;
  private writing: Promise<boolean> | undefined;

  constructor(
    private readonly store: Store,
    private readonly storage: StorageHealth,
    private readonly redis?: SharedRedis,
  ) {}

  attach(parts: { batcher: WriteBatcher | undefined; engine: Engine | undefined }): void {
    this.batcher = parts.batcher;
    this.engine = parts.engine;
    this.attached = true;
  }

  markStarted(): void {
    this.started = true;
  }

  markClosing(): void {
    this.closing = true;
  }

  get shuttingDown(): boolean {
    return this.closing;
  }

  private async migrations(): Promise<ReadinessReport['checks']['migrations']> {
    if (this.migrated) return 'applied';
    try {
      this.migrated = (await storeMigrationStatus(this.store)).pending.length === 0;
      return this.migrated ? 'applied' : 'pending';
    } catch {
      return 'unknown';
    }
  }

  private writeCheck(): Promise<boolean> {
    if (!this.attached) return Promise.resolve(false);
    if (performance.now() - this.wroteAt < WRITE_CHECK_REUSE_MS) return Promise.resolve(true);
    this.writing ??= this.write().finally(() => {
      this.writing = undefined;
    });
    return this.writing;
  }

  private async write(): Promise<boolean> {
    try {
      // A real write (the row changed and changed back), so a full disk or a read-only file fails it.
      if (isSqliteStore(this.store) && this.batcher) {
        // Prepared on the writer connection, on which the group commit runs its jobs.
        const writer = this.store.writer.$client;
        this.touch ??= TOUCH.map((text) => writer.prepare(text));
        const touch = this.touch;
        await this.batcher.run(() => {
          for (const statement of touch) statement.run();
        });
      } else {
        await this.store.transaction(async (tx) => {
          for (const text of TOUCH) await execute(this.store, tx, sql.raw(text));
        });
      }
      this.wroteAt = performance.now();
      return true;
    } catch {
      return false;
    }
  }

  async check(): Promise<ReadinessReport> {
    const migrations = await this.migrations();
    const engine = this.engine ? (this.engine.stats().up ? 'up' : 'down') : 'off';
    const writable = !this.closing && this.started && migrations === 'applied' ? await this.writeCheck() : false;
    // Read after the write check: a write that succeeds with room free clears "full".
    const storage = this.storage.full ? 'full' : writable ? 'ok' : 'failing';
    const redis = this.redis ? ((await this.redis.ping()) ? 'up' : 'down') : 'off';
    const checks = { migrations, engine, storage, redis } as const;
    if (this.closing) return { ready: false, code: 'shutting_down', detail: 'The server is shutting down', checks };
    if (!this.started || migrations !== 'applied' || engine === 'down') {
      const why = migrations !== 'applied' ? 'migrations are not applied' : engine === 'down' ? 'the run engine is not up' : 'the server is starting';
      return { ready: false, code: 'starting', detail: `Not ready: ${why}`, checks };
    }
    if (storage !== 'ok') {
      return storage === 'full'
        ? { ready: false, code: 'storage_full', detail: 'The disk of the data folder is full: writes fail until space is freed', checks }
        : { ready: false, code: 'not_ready', detail: 'The database did not take a write', checks };
    }
    return { ready: true, code: null, detail: 'ready', checks };
  }
}

/**
 * Ties readiness to the app's life: ready from onReady; from the moment closing starts
 * (preClose, before the listener closes) /readyz says so, and every request still reaching
 * the server (on a kept-alive connection) is answered 503 shutting_down, as a problem, with
 * Connection: close. Fastify's own return503OnClosing answers with a body of its own, so
 * buildApp turns that off in favour of this.
 */
export function registerReadiness(app: App, readiness: Readiness): void {
  app.addHook('onReady', async () => readiness.markStarted());
  app.addHook('preClose', async () => readiness.markClosing());
  app.addHook('onRequest', (_req, reply, done) => {
    if (!readiness.shuttingDown) return done();
    reply.header('connection', 'close');
    // Answered here: the request goes no further (done is not called).
    sendProblem(reply, problem(503, 'shutting_down', 'The server is shutting down; retry on another node or in a moment'), { 'retry-after': '5' });
  });
}
