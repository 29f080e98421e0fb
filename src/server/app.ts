import { randomUUID } from 'node:crypto';
import { isUtf8 } from 'node:buffer';
import { createServer, type IncomingMessage } from 'node:http';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Ajv } from 'ajv';
import fastJsonStringify from 'fast-json-stringify';
import Fastify, { type FastifyBaseLogger, type FastifyError, type FastifyInstance, type RouteOptions } from 'fastify';
import type { Config } from '../core/config.js';
import { isSqliteStore, type PgStore, type Store } from '../core/db/store.js';
import { pgIntake, sqliteIntake } from '../core/db/intake.js';
import { LoginThrottle } from '../core/services/auth.js';
import { openRedis, windowsFor } from '../core/redis.js';
import { clusterSignals } from '../core/signals.js';
import { AppError, isIdentityEncoding, unsupportedEncoding, ValidationError } from '../core/errors.js';
import { jsonDepthExceeds, nulPointer, undecodableQueryPointer, unstorableText } from '../core/validation.js';
import { registerAuth } from './plugins/auth.js';
import { problem, registerErrorHandling, SECURITY_HEADERS, sendProblem } from './plugins/errors.js';
import { answerClientError, closeConnectionsWithoutRequest, cutOffStalledBodies, trackConnections } from './bodyTimeout.js';
import { lazyChildLoggerFactory, loggerOptions } from './plugins/logging.js';
import { apiKeyRoutes } from './routes/apiKeys.js';
import { sandboxRoutes } from './routes/sandbox.js';
import { sandboxLookup } from '../core/services/sandbox.js';
import { authRoutes } from './routes/auth.js';
import { contactRoutes } from './routes/contacts.js';
import { contactImportRoutes } from './routes/contactImport.js';
import { healthRoutes } from './routes/health.js';
import { webhookRoutes } from './routes/webhooks.js';
import { templateRoutes } from './routes/templates.js';
import { workflowRoutes } from './routes/workflows.js';
import { automationRoutes } from './routes/automations.js';
import { auditRoutes } from './routes/audit.js';
import { adminRoutes } from './routes/admin.js';
import { billingRoutes } from './routes/billing.js';
import { membershipRoutes } from './routes/memberships.js';
import { messageRoutes } from './routes/messages.js';
import { webhookTestRoutes } from './routes/webhookTest.js';
import { registerOpenApi } from './openapi.js';
import { docsRoutes } from './docs.js';
import { VERSION } from '../core/version.js';
import { RenderPool } from '../engine/renderPool.js';
import { settingsRoutes } from './routes/settings.js';
import { WriteBatcher } from '../core/db/batcher.js';
import { Engine, type EngineOptions } from '../engine/scheduler.js';
import { WebhookReceiver } from '../core/services/webhooks.js';
import { pruneAll, pruneAllPg, Pruner } from '../core/services/retention.js';
import { settleAbandonedSends } from '../core/services/deliveries.js';
import { compactSearchIndex } from '../core/db/searchIndex.js';
import { StorageHealth } from '../core/db/storage.js';
import { Metrics, metricsRoute, registerMetrics } from './metrics.js';
import { Readiness, registerReadiness } from './readiness.js';
import { consoleRoutes, readConsoleFiles } from './console.js';
import { isWebhookRequest, MAX_TOKEN_LENGTH, WEBHOOK_PREFIX, WebhookIngress, webhookToken } from './webhookIngress.js';

export interface AppDeps {
  config: Config;
  store: Store;
  /** A logger to use instead of building one from config (tests pass a silent one). */
  logger?: FastifyBaseLogger | false;
  /** Where the built logger writes: stdout (default), or stderr when stdout is for `svc serve --json`. */
  logTo?: 'stdout' | 'stderr';
  /** Execute runs in this process (svc serve does; API-only tests need not). */
  engine?: boolean | EngineOptions;
  /** Told of every route as it is registered (tests compare the route table with the OpenAPI document). */
  onRoute?: (route: RouteOptions) => void;
}

/** How often an engine woken by its cluster's signals polls the database (see core/signals.ts). */
const CLUSTER_POLL_MS = 1_000;

declare module 'fastify' {
  interface FastifyInstance {
    /** The run engine, when this process executes runs. */
    engine: Engine | undefined;
    /** Says runs were queued: this node's engine claims them now, and the cluster's other nodes are woken. */
    runsQueued(): void;
    /** The Prometheus metrics, when served (a metrics token or port is set). */
    metrics: Metrics | undefined;
  }
}

// The server, request and reply types stay open: routes are written against the type provider.
// biome-ignore lint/suspicious/noExplicitAny: Fastify's own default generics for these three
export type App = FastifyInstance<any, any, any, FastifyBaseLogger, TypeBoxTypeProvider>;

const REQUEST_ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;

/** A request's id: the client's X-Request-Id when it is well formed, else a new one. */
function requestId(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && REQUEST_ID_RE.test(given) ? given : randomUUID();
}

/** Fastify's defaults for the server it would build, on the one buildApp builds (see serverFactory). */
const KEEP_ALIVE_TIMEOUT_MS = 72_000;
/** How deep any JSON body of the API may nest (its fields that hold JSON have lower limits). */
export const MAX_API_BODY_DEPTH = 128;

/**
 * Bodies are validated strictly (no type coercion, unknown fields refused); query strings
 * and path parameters arrive as text, so there Ajv coerces numbers and booleans, but only
 * from plain decimal text: "0x2", "2e0" or "+2" must not alias id 2.
 */
const strictAjv = new Ajv({ allErrors: true, coerceTypes: false, removeAdditional: false, useDefaults: true, strict: false });
const coercingAjv = new Ajv({ allErrors: true, coerceTypes: 'array', removeAdditional: false, useDefaults: true, strict: false });

/**
 * Validators and serializers are compiled once per process, by the schema's text: every app
 * built in one process (the tests build hundreds, a cluster benchmark several) shares them
 * instead of compiling each route's schemas again, which is most of what building an app costs.
 * And each is compiled on its first use, not when its route is registered: Ajv and
 * fast-json-stringify generate code, and a node serving webhooks would otherwise hold the
 * compiled schemas of every route it never serves. Both kinds of function are pure; a
 * validator's `errors` is read right after its call.
 */
type Validator = ReturnType<typeof compileValidator>;
const compiledValidators = new Map<string, Validator>();
const compiledSerializers = new Map<string, (data: unknown) => string>();

function validatorCompiler({ schema, httpPart }: { schema: object; httpPart?: string }) {
  const key = `${httpPart === 'body' ? 'body' : 'text'} ${JSON.stringify(schema)}`;
  let validate = compiledValidators.get(key);
  if (!validate) {
    let compiled: Validator | undefined;
    const lazy = ((data: unknown) => {
      compiled ??= compileValidator(schema, httpPart);
      const ok = compiled(data);
      lazy.errors = compiled.errors;
      return ok;
    }) as Validator;
    validate = lazy;
    compiledValidators.set(key, validate);
  }
  return validate;
}

function serializerCompiler({ schema }: { schema: object }) {
  const key = JSON.stringify(schema);
  let serialize = compiledSerializers.get(key);
  if (!serialize) {
    let compiled: ((data: unknown) => string) | undefined;
    serialize = (data) => {
      compiled ??= fastJsonStringify(schema);
      return compiled(data);
    };
    compiledSerializers.set(key, serialize);
  }
  return serialize;
}

function compileValidator(schema: object, httpPart: string | undefined) {
  if (httpPart === 'body') return strictAjv.compile(schema);
  const validate = coercingAjv.compile(schema);
  const integers = Object.entries((schema as { properties?: Record<string, { type?: string }> }).properties ?? {})
    .filter(([, s]) => s.type === 'integer')
    .map(([name]) => name);
  if (!integers.length) return validate;
  const checked: { (data: Record<string, unknown>): boolean; errors?: typeof validate.errors } = (data) => {
    for (const name of integers) {
      const raw = data?.[name];
      if (typeof raw === 'string' && !DECIMAL_RE.test(raw)) {
        checked.errors = [{ instancePath: `/${name}`, keyword: 'type', message: 'must be a decimal integer', params: {}, schemaPath: '' }];
        return false;
      }
    }
    const ok = validate(data);
    checked.errors = validate.errors;
    return ok;
  };
  return checked as typeof validate;
}

const DECIMAL_RE = /^-?(0|[1-9][0-9]{0,15})$/;

export { SECURITY_HEADERS };

/**
 * Fastify's own hop count trusts no hop at all (it cannot check the peer), so a count is
 * given as a function: the socket's peer and the next n-1 hops are proxies, and the address
 * the n-th proxy saw is the client's. Lists are addresses/CIDRs; config refuses "every hop".
 */
export function trustProxyOption(setting: Config['trustProxy']): false | string[] | ((address: string, hop: number) => boolean) {
  if (setting === false) return false;
  if (typeof setting === 'number') return (_address, hop) => hop < setting;
  return [...setting];
}

/** What an empty, over-long or multi-segment webhook token is routed as: a token no workflow has. */
const UNROUTABLE_TOKEN = '-';

/**
 * Every POST under /v1/webhooks/in reaches the webhook route, so that the per-address
 * limit counts it and it is answered 404 webhook_not_found with the rate-limit headers,
 * whatever the token looks like (empty, longer than the router takes, or with slashes).
 * Which URLs those are is the ingress's rule (webhookToken); this only applies it for the
 * requests Fastify routes itself (app.inject).
 */
export function webhookUrlForRouting(url: string): string {
  if (!isWebhookRequest('POST', url) || webhookToken(url) !== '') return url;
  const q = url.indexOf('?');
  return `${WEBHOOK_PREFIX}/${UNROUTABLE_TOKEN}${q === -1 ? '' : url.slice(q)}`;
}

/** The one route that reads a compressed body, gzip: a contact import (routes/contactImport.ts). */
const IMPORT_ROUTE = '/contacts/import';
const GZIP_RE = /^\s*(x-)?gzip\s*$/i;

/** Whether a request carries a body: chunked, or a Content-Length other than 0. */
function hasBody(headers: IncomingMessage['headers']): boolean {
  const length = headers['content-length'];
  return headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

export async function buildApp(deps: AppDeps): Promise<App> {
  const { config } = deps;
  // The inbound webhook is answered on node:http directly (webhookIngress.ts): the server
  // hands it its requests before Fastify sees them; every other request goes to Fastify.
  let ingress: WebhookIngress | undefined;
  const app = Fastify({
    serverFactory: (handler) => {
      const server = createServer((req, res) => (ingress && isWebhookRequest(req.method, req.url) ? ingress.handle(req, res) : handler(req, res)));
      server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
      server.requestTimeout = 0;
      cutOffStalledBodies(server, config.bodyTimeoutSeconds * 1000, requestId);
      trackConnections(server);
      return server;
    },
    ...(deps.logger === undefined ? { logger: loggerOptions(config, deps.logTo) } : deps.logger ? { loggerInstance: deps.logger } : { logger: false }),
    ...(deps.logger !== false ? { childLoggerFactory: lazyChildLoggerFactory } : {}),
    bodyLimit: config.bodyLimit,
    trustProxy: trustProxyOption(config.trustProxy),
    rewriteUrl: (req) => (req.method === 'POST' ? webhookUrlForRouting(req.url ?? '/') : (req.url ?? '/')),
    requestIdHeader: false,
    genReqId: requestId,
    // Requests arriving while closing are answered 503 shutting_down as a problem (readiness.ts).
    return503OnClosing: false,
    routerOptions: { maxParamLength: MAX_TOKEN_LENGTH },
    // Errors raised by the router itself, before any route runs: answered as problems too.
    frameworkErrors: (err, req, reply) => {
      const code = (err as { code?: string }).code;
      reply.header('x-request-id', req.id).headers(SECURITY_HEADERS);
      if (code === 'FST_ERR_MAX_PARAM_LENGTH') {
        const webhook = req.url.startsWith('/v1/webhooks/in/');
        return sendProblem(
          reply,
          problem(404, webhook ? 'webhook_not_found' : 'not_found', webhook ? 'No active webhook workflow has this URL' : 'No resource has this id'),
        );
      }
      return sendProblem(reply, problem(400, 'bad_url', 'The URL could not be decoded'));
    },
    forceCloseConnections: 'idle',
    clientErrorHandler: answerClientError,
  }).withTypeProvider<TypeBoxTypeProvider>();

  if (deps.onRoute) app.addHook('onRoute', deps.onRoute);
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  // Only JSON is accepted; text/plain would otherwise slip past as a string body.
  app.removeContentTypeParser('text/plain');
  registerJsonParser(app);

  // The hooks every request passes are callback-style: an async hook costs a promise each.
  app.addHook('onRequest', (req, reply, done) => {
    reply.header('x-request-id', req.id).headers(SECURITY_HEADERS);
    // A compressed body is refused before it is read (415 unsupported_content_encoding).
    const encoding = req.headers['content-encoding'];
    if (encoding !== undefined && !isIdentityEncoding(encoding) && hasBody(req.headers)) {
      const importing = req.routeOptions.url === IMPORT_ROUTE;
      if (!importing || !GZIP_RE.test(encoding)) return done(unsupportedEncoding(importing ? 'gzip, identity' : 'identity'));
    }
    done();
  });

  // A query string that is not valid percent-encoding is 400 invalid_query, not decoded
  // leniently into a filter that matches nothing. Text with U+0000 fits neither store's
  // columns on PostgreSQL: refused alike on both, in the URL (no resource or filter value
  // holds one: a path as its 404, a query as its 400) as in the body.
  app.addHook('preValidation', (req, _reply, done) => {
    const query = req.url.indexOf('?');
    if (query !== -1 && req.url.includes('%', query) && !req.routeOptions.config.page) {
      const at = undecodableQueryPointer(req.url.slice(query + 1));
      if (at !== undefined)
        return done(
          new AppError(400, 'invalid_query', 'The query string is not valid percent-encoding: each % must start a UTF-8 byte as two hex digits', {
            errors: [{ path: at, message: 'must be valid percent-encoded UTF-8' }],
          }),
        );
    }
    if (req.url.includes('%00') && !req.routeOptions.config.page) {
      if (nulPointer(req.params) !== undefined) return done(new AppError(404, 'not_found', 'No resource has this id'));
      const inQuery = nulPointer(req.query);
      if (inQuery !== undefined)
        return done(
          new AppError(400, 'invalid_query', 'The query string may not contain the NUL character (U+0000)', {
            errors: [{ path: inQuery, message: 'must not contain U+0000' }],
          }),
        );
    }
    const body = req.body;
    if (body === null || typeof body !== 'object' || Buffer.isBuffer(body) || typeof (body as { pipe?: unknown }).pipe === 'function') return done();
    // No API body nests this deep (fields that hold JSON have lower limits of their own); a
    // deeper one would overflow the stack where it is serialised (stored, logged, answered).
    if (jsonDepthExceeds(body, MAX_API_BODY_DEPTH))
      return done(new ValidationError('body_too_deep', `The body nests more than ${MAX_API_BODY_DEPTH} levels deep`));
    // A route that stores nothing of its body may take U+0000 in it (the webhook dry run: a
    // real webhook body may hold one where nothing reads it).
    if (req.routeOptions.config.nulInBody) return done();
    const bad = unstorableText(body);
    if (bad === undefined) return done();
    done(
      new ValidationError('validation_failed', 'Text may not contain the NUL character (U+0000) or a lone surrogate', [{ path: bad.at, message: bad.message }]),
    );
  });

  // A shutdown finishes the requests under way, but not for ever: after the grace period
  // (SVC_SHUTDOWN_GRACE) the connections still open are closed, whatever they are waiting for.
  // A connection with no request under way is closed at once.
  let forceClose: NodeJS.Timeout | undefined;
  let stopSweep: (() => void) | undefined;
  app.addHook('preClose', (done) => {
    forceClose = setTimeout(() => app.server.closeAllConnections(), config.shutdownGraceSeconds * 1000);
    forceClose.unref();
    stopSweep = closeConnectionsWithoutRequest(app.server);
    done();
  });
  app.addHook('onClose', (_instance, done) => {
    clearTimeout(forceClose);
    stopSweep?.();
    done();
  });

  // Disk full: failed writes answer 503 storage_full, /readyz says not ready, the log says so once a minute.
  const storage = new StorageHealth(config.dataDir, app.log);
  // Redis, when the nodes of a cluster share one: the per-address webhook limit is counted there.
  const redis = config.redisUrl
    ? openRedis(config.redisUrl, config.redisPrefix, (err) =>
        app.log.warn({ err: { message: err.message } }, 'Redis does not answer; the limits shared across nodes are counted per node until it does'),
      )
    : undefined;
  if (redis) app.addHook('onClose', () => redis.close());
  const readiness = new Readiness(deps.store, storage, redis);
  registerReadiness(app, readiness);
  registerErrorHandling(app, storage);
  const metrics =
    config.metricsToken !== null || config.metricsPort !== null ? new Metrics({ config, store: deps.store, storage, engine: () => app.engine }) : undefined;
  app.decorate('metrics', metrics);
  if (metrics) registerMetrics(app, metrics);
  registerAuth(app, { store: deps.store, config, redis });
  // Before the routes, so that the OpenAPI document sees every one of them.
  await registerOpenApi(app, { version: VERSION, publicUrl: config.publicUrl, sandboxUrl: config.sandboxUrl });
  await app.register(docsRoutes);

  const throttle = new LoginThrottle(config.loginRateLimit, undefined, { windows: windowsFor(redis, 'login-failures') });
  await app.register(healthRoutes, { store: deps.store, readiness });
  await app.register(metricsRoute, { metrics, token: config.metricsToken });
  await app.register(authRoutes, { throttle, publicUrl: config.publicUrl });
  await app.register(apiKeyRoutes);
  await app.register(sandboxRoutes);
  await app.register(contactRoutes);
  await app.register(contactImportRoutes);
  await app.register(workflowRoutes);
  await app.register(automationRoutes);
  await app.register(auditRoutes);
  await app.register(adminRoutes);
  await app.register(billingRoutes, { config });
  await app.register(membershipRoutes, { publicUrl: config.publicUrl, throttle });
  await app.register(settingsRoutes);
  await app.register(webhookTestRoutes);
  // Previews and test emails render in a thread of their own, never on the event loop.
  const renderPool = new RenderPool();
  app.addHook('onClose', () => renderPool.close());
  await app.register(messageRoutes, { renderPool });
  await app.register(templateRoutes, { renderPool });

  // SQLite's hot paths share one group commit on the writer connection; on PostgreSQL intake
  // and the engine have group commits of their own (db/intake.ts, engine/committer.ts).
  const sqlite = isSqliteStore(deps.store) ? deps.store : undefined;
  const batcher = sqlite ? new WriteBatcher(sqlite) : undefined;
  if (batcher) batcher.storage = storage;
  const intake = sqlite && batcher ? sqliteIntake(sqlite, batcher) : pgIntake(deps.store as PgStore);
  const receiver = new WebhookReceiver(deps.store, config, intake);
  // With Redis, a node that queues runs wakes the others (core/signals.ts), so the engines
  // may poll the database slowly: a poll is then only the fallback for a lost signal, for
  // due delays and for expired leases.
  let engine: Engine | undefined;
  const signals = redis ? clusterSignals(redis, deps.engine ? { wake: () => engine?.poke() } : {}) : undefined;
  if (signals) app.addHook('onClose', () => signals.close());
  const engineOptions = { ...(redis ? { pollMs: CLUSTER_POLL_MS } : {}), ...(deps.engine === true ? {} : deps.engine) };
  engine = deps.engine ? new Engine(deps.store, config, batcher, app.log, engineOptions) : undefined;
  app.decorate('engine', engine);
  app.decorate('runsQueued', () => {
    engine?.poke();
    signals?.wake();
  });
  readiness.attach({ batcher, engine });
  ingress = new WebhookIngress({
    config,
    receiver,
    readiness,
    storage,
    metrics,
    redis,
    log: app.log,
    requestId,
    trustProxy: trustProxyOption(config.trustProxy),
    isSandbox: sandboxLookup(deps.store.db),
    onAccepted: () => app.runsQueued(),
  });
  await app.register(webhookRoutes, { ingress });
  // The web console, after every API route: its paths (/, /app/*, /invite) are none of the API's.
  await app.register(consoleRoutes, config.consoleDir ? { files: readConsoleFiles(config.consoleDir) } : {});

  // What the retention settings no longer keep is pruned at start and every 10 minutes, in
  // small batches through the group commit, so requests go on between batches. On SQLite the
  // contact search index is then compacted when changed and deleted contacts left it many
  // tombstones (searchIndex.ts), also in small steps.
  const pruner = sqlite && batcher ? new Pruner(sqlite, config) : undefined;
  let pruning: Promise<void> | undefined;
  let closing = false;
  const compact = async () => {
    if (!sqlite) return;
    const { steps } = await compactSearchIndex(sqlite, { stop: () => closing });
    if (steps > 0) app.log.info({ steps }, 'compacted the contact search index');
  };
  const prune = () => {
    pruning ??= (pruner && batcher ? pruneAll(pruner, (work) => batcher.run(work)) : pruneAllPg(deps.store, config))
      .then(async (deleted) => {
        if (Object.values(deleted).some((n) => n > 0)) app.log.info({ deleted }, 'pruned what the retention settings no longer keep');
        const settled = await settleAbandonedSends({ db: deps.store.db, store: deps.store }, new Date(Date.now() - abandonedAfterMs(config)).toISOString());
        if (settled > 0) app.log.warn({ settled }, 'settled system emails left SENDING by a process that stopped');
        await compact().catch((err: unknown) => app.log.warn({ err }, 'compacting the contact search index failed; it is tried again in 10 minutes'));
      })
      .catch((err: unknown) => app.log.warn({ err }, 'pruning failed; it is tried again in 10 minutes'))
      .finally(() => (pruning = undefined));
  };
  const pruneTimer = setInterval(prune, 10 * 60_000).unref();
  app.addHook('onReady', async () => {
    prune();
    engine?.start();
  });
  app.addHook('onClose', async () => {
    clearInterval(pruneTimer);
    closing = true;
    await pruning;
    await engine?.stop();
    await batcher?.close();
    await intake.close();
    await metrics?.close();
  });
  return app;
}

/**
 * Fastify's own JSON parser (secure-json-parse: `__proto__` and `constructor.prototype` are
 * refused), read as bytes first: a body that is not UTF-8 is 400 (JSON is UTF-8; decoded
 * leniently, its bad bytes became U+FFFD in what was stored); a refused key is named, not
 * called invalid JSON; and a DELETE with `Content-Type: application/json` and no body, as
 * some clients send every request, is a DELETE without a body.
 */
function registerJsonParser(app: App): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (req, body: Buffer, done) => {
    if (body.length === 0 && req.method === 'DELETE') return done(null, undefined);
    if (!isUtf8(body)) return done(new AppError(400, 'invalid_json', 'The body is not valid JSON: it is not UTF-8 text'));
    const text = body.toString('utf8');
    void parse(req, text, (err, value) => {
      if (err && (err as FastifyError).code === 'FST_ERR_CTP_INVALID_JSON_BODY' && parsesAsJson(text))
        return done(new AppError(400, 'invalid_json', 'The body has a key "__proto__", or "constructor" holding "prototype": such keys are refused'));
      done(err as FastifyError | null, value);
    });
  });
}

function parsesAsJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/**
 * How long a system email's attempt may stay SENDING before it counts as abandoned by a
 * stopped process: far past what one try can take (the outbound timeout bounds it).
 */
function abandonedAfterMs(config: Pick<Config, 'httpTimeoutMs'>): number {
  return 10 * 60_000 + 3 * config.httpTimeoutMs;
}
