import { createHash, timingSafeEqual } from 'node:crypto';
import { statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Config } from '../core/config.js';
import type { StorageHealth } from '../core/db/storage.js';
import { sql, type SQL } from 'drizzle-orm';
import { queryRows } from '../core/db/dialect.js';
import { isSqliteStore, type Store } from '../core/db/store.js';
import { UnauthorizedError } from '../core/errors.js';
import { VERSION } from '../core/version.js';
import { deliveryTotals } from '../engine/counters.js';
import type { Engine } from '../engine/scheduler.js';
import type { App } from './app.js';
import { problem, sendProblem } from './plugins/errors.js';
import { WEBHOOK_ROUTE } from './webhookIngress.js';

/**
 * Counts of runs by status are index range scans; past this many a count stops (a backlog
 * of millions would otherwise cost a scrape tens of milliseconds on the event loop).
 */
export const RUN_COUNT_CAP = 100_000;
/** The label of requests no route matched (never the raw URL: it may hold a token). */
const UNMATCHED = '(unmatched)';
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export interface MetricsSources {
  config: Config;
  /** Read only: the counts and pragmas go through its reading connection. */
  store: Store;
  storage: StorageHealth;
  /** The run engine, once built (undefined on an ingest-only node). */
  engine: () => Engine | undefined;
}

/**
 * The Prometheus metrics of one server. What a scrape reads costs no table scan: HTTP and
 * webhook counts are kept in process as requests are answered; delivery and run outcomes
 * come from the engine's threads in the messages they already send (engine/counters.ts);
 * runs by status are capped index range scans; the oldest due QUEUED run is one index
 * seek; SQLite's sizes are pragmas and one stat of the WAL file.
 */
export class Metrics {
  readonly registry = new Registry();
  private readonly http: Counter<'method' | 'route' | 'status'>;
  private readonly latency: Histogram<'method' | 'route'>;
  private readonly accepted: Counter<'replayed'>;
  private readonly refused: Counter<'code'>;
  private listener: Server | undefined;

  constructor(sources: MetricsSources) {
    const registers = [this.registry];
    const { store, config, storage } = sources;
    collectDefaultMetrics({ register: this.registry });

    this.http = new Counter({
      name: 'svc_http_requests_total',
      help: 'HTTP requests answered, by route pattern, method and status',
      labelNames: ['method', 'route', 'status'],
      registers,
    });
    this.latency = new Histogram({
      name: 'svc_http_request_duration_seconds',
      help: 'Time to answer an HTTP request, by route pattern and method',
      labelNames: ['method', 'route'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.accepted = new Counter({
      name: 'svc_webhooks_accepted_total',
      help: 'Inbound webhooks answered 202 (replayed: an Idempotency-Key seen before)',
      labelNames: ['replayed'],
      registers,
    });
    this.refused = new Counter({ name: 'svc_webhooks_refused_total', help: 'Inbound webhooks refused, by problem code', labelNames: ['code'], registers });

    new Gauge({ name: 'svc_build_info', help: 'The running version of svc', labelNames: ['version'], registers }).set({ version: VERSION }, 1);

    // Through the reading handle: the writer may be inside a transaction, between its
    // awaits, whose rows a scrape must not count before they commit.
    const rows = <T extends Record<string, unknown>>(query: SQL) => queryRows<T>(store, store.db, query);
    const count = async (query: SQL) => Number((await rows<{ n: number }>(query))[0]?.n ?? 0);

    new Gauge({
      name: 'svc_runs',
      help: `Runs not yet finished, by status (counts stop at ${RUN_COUNT_CAP})`,
      labelNames: ['status'],
      registers,
      async collect() {
        // Each status a literal, not a parameter: its rows are a partial index of their own.
        for (const status of ['QUEUED', 'RUNNING', 'WAITING']) {
          this.set(
            { status },
            await count(sql`SELECT count(*) AS n FROM (SELECT 1 FROM workflow_runs WHERE status = ${sql.raw(`'${status}'`)} LIMIT ${RUN_COUNT_CAP}) capped`),
          );
        }
      },
    });
    new Gauge({
      name: 'svc_runs_queue_depth',
      help: `QUEUED runs due now, waiting for a claim (counts stop at ${RUN_COUNT_CAP})`,
      registers,
      async collect() {
        const now = new Date().toISOString();
        this.set(
          await count(sql`SELECT count(*) AS n FROM (SELECT 1 FROM workflow_runs WHERE status = 'QUEUED' AND run_at <= ${now} LIMIT ${RUN_COUNT_CAP}) capped`),
        );
      },
    });
    new Gauge({
      name: 'svc_runs_claim_lag_seconds',
      help: 'Age of the oldest QUEUED run due now (0 when none waits)',
      registers,
      async collect() {
        const now = Date.now();
        const [row] = await rows<{ at: string | null }>(
          sql`SELECT min(run_at) AS at FROM workflow_runs WHERE status = 'QUEUED' AND run_at <= ${new Date(now).toISOString()}`,
        );
        this.set(row?.at ? Math.max(0, (now - Date.parse(row.at)) / 1000) : 0);
      },
    });

    const engine = sources.engine;
    new Counter({
      name: 'svc_runs_finished_total',
      help: 'Runs this process executed to a resting point since it started, by outcome (COMPLETED, FAILED, WAITING, ...)',
      labelNames: ['outcome'],
      registers,
      collect() {
        this.reset();
        for (const [outcome, n] of Object.entries(engine()?.stats().outcomes ?? {})) this.inc({ outcome }, n);
      },
    });
    new Counter({
      name: 'svc_deliveries_total',
      help: 'Delivery attempts that ended, by channel, provider and status (SENT or FAILED), since this process started',
      labelNames: ['channel', 'provider', 'status'],
      registers,
      collect() {
        this.reset();
        for (const d of deliveryTotals()) this.inc({ channel: d.channel, provider: d.provider, status: d.status }, d.n);
      },
    });
    const engineGauge = (name: string, help: string, read: (s: ReturnType<Engine['stats']>) => number) =>
      new Gauge({
        name,
        help,
        registers,
        collect() {
          const stats = engine()?.stats();
          this.set(stats ? read(stats) : 0);
        },
      });
    engineGauge('svc_engine_threads', 'Worker threads of the run engine (0: this node runs no engine)', (s) => s.threads);
    engineGauge('svc_engine_runs_in_flight', 'Runs this process is executing now', (s) => s.runsInFlight);
    engineGauge('svc_engine_run_capacity', 'Runs this process executes at once at most (runConcurrency)', (s) => s.runConcurrency);
    engineGauge('svc_engine_utilization', 'Share of the run slots in use (runs in flight / runConcurrency), 0 to 1', (s) =>
      s.runConcurrency ? s.runsInFlight / s.runConcurrency : 0,
    );
    engineGauge('svc_engine_queued_tasks', 'Batches of claimed runs waiting for a free worker thread', (s) => s.queuedTasks);

    // SQLite's file, on a SQLite node (PostgreSQL reports on its own server).
    if (isSqliteStore(store)) {
      const c = store.db.$client;
      const pragma = (name: string) => Number(c.pragma(name, { simple: true }));
      new Gauge({
        name: 'svc_sqlite_page_count',
        help: 'Pages in the SQLite database file',
        registers,
        collect: function () {
          this.set(pragma('page_count'));
        },
      });
      new Gauge({
        name: 'svc_sqlite_page_size_bytes',
        help: 'Size of one SQLite page',
        registers,
        collect: function () {
          this.set(pragma('page_size'));
        },
      });
      new Gauge({
        name: 'svc_sqlite_freelist_pages',
        help: 'Unused pages in the SQLite database file',
        registers,
        collect: function () {
          this.set(pragma('freelist_count'));
        },
      });
      new Gauge({
        name: 'svc_sqlite_wal_bytes',
        help: 'Size of the SQLite write-ahead log file',
        registers,
        collect() {
          try {
            this.set(statSync(`${config.dbFile}-wal`).size);
          } catch {
            this.set(0);
          }
        },
      });
    }
    new Gauge({
      name: 'svc_storage_full',
      help: '1 while writes fail for lack of disk space (requests answer 503 storage_full)',
      registers,
      collect() {
        this.set(storage.full ? 1 : 0);
      },
    });
  }

  /** Counts an answered request (an onResponse hook). */
  observe(
    method: string,
    route: string | undefined,
    status: number,
    seconds: number,
    reply: { problemCode: string | null; getHeader(name: string): unknown },
  ): void {
    const pattern = route ?? UNMATCHED;
    this.http.inc({ method, route: pattern, status: String(status) });
    this.latency.observe({ method, route: pattern }, seconds);
    if (pattern !== WEBHOOK_ROUTE || method !== 'POST') return;
    if (status === 202) this.accepted.inc({ replayed: reply.getHeader('idempotent-replayed') === 'true' ? 'true' : 'false' });
    else if (status >= 400) this.refused.inc({ code: reply.problemCode ?? String(status) });
  }

  /** The exposition text. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /**
   * A listener on 127.0.0.1 that serves GET /metrics without a token (svc serve starts it
   * when metricsPort is set). Resolves with its address.
   */
  async listen(port: number): Promise<string> {
    const server = createServer((req, res) => {
      const path = (req.url ?? '/').split('?')[0];
      if (path !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
        res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('Only GET /metrics is served here\n');
        return;
      }
      this.text().then(
        (body) => res.writeHead(200, { 'content-type': this.contentType }).end(req.method === 'HEAD' ? undefined : body),
        () => res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('The metrics could not be collected\n'),
      );
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.listener = server;
    const { port: bound } = server.address() as AddressInfo;
    return `http://127.0.0.1:${bound}`;
  }

  async close(): Promise<void> {
    const server = this.listener;
    this.listener = undefined;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

/**
 * GET /metrics on the public port: only with SVC_METRICS_TOKEN set, and then only for
 * `Authorization: Bearer <token>` (compared in constant time). Without a token it answers
 * like any unknown path, whether or not a metrics port serves the metrics elsewhere.
 */
export async function metricsRoute(app: App, opts: { metrics: Metrics | undefined; token: string | null }): Promise<void> {
  const expected = opts.token === null ? null : digest(opts.token);
  app.get('/metrics', { config: { access: 'public' }, schema: { hide: true } }, async (req, reply) => {
    if (!opts.metrics || !expected) return sendProblem(reply, problem(404, 'route_not_found', `No route GET /metrics`));
    const given = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '')?.[1];
    if (!given || !timingSafeEqual(digest(given), expected)) {
      throw new UnauthorizedError('invalid_token', 'GET /metrics needs Authorization: Bearer <SVC_METRICS_TOKEN>');
    }
    return reply.type(opts.metrics.contentType).send(await opts.metrics.text());
  });
}

/** Counts every answered request; in buildApp before the routes. */
export function registerMetrics(app: App, metrics: Metrics): void {
  app.addHook('onResponse', async (req, reply) => {
    metrics.observe(req.method, req.routeOptions.url, reply.statusCode, reply.elapsedTime / 1000, reply);
  });
}
