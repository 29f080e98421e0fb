import { isUtf8 } from 'node:buffer';
import type { IncomingMessage, ServerResponse } from 'node:http';
import proxyAddr from '@fastify/proxy-addr';
import LocalStore from '@fastify/rate-limit/store/LocalStore.js';
import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../core/config.js';
import type { SharedRedis } from '../core/redis.js';
import type { StorageHealth } from '../core/db/storage.js';
import { AppError } from '../core/errors.js';
import { hasSandboxAddress, sandboxHostMatcher } from '../core/services/sandbox.js';
import {
  SIGNATURE_HEADER,
  type Accepted,
  type ReceivedRequest,
  type RequestHead,
  type WebhookReceiver,
  type WebhookTarget,
} from '../core/services/webhooks.js';
import type { Metrics } from './metrics.js';
import { problem, SECURITY_HEADERS, STORAGE_FULL_RETRY_AFTER, type Problem } from './plugins/errors.js';
import type { Readiness } from './readiness.js';
import { sharedLimitStore } from './sharedLimits.js';

/** The inbound webhook's route, as the metrics, the logs and the OpenAPI document name it. */
export const WEBHOOK_ROUTE = '/v1/webhooks/in/:token';
export const WEBHOOK_PREFIX = '/v1/webhooks/in';
/** Longer tokens, more than one segment or none are answered as a token no workflow has. */
export const MAX_TOKEN_LENGTH = 256;
const NOT_FOUND = 'No active webhook workflow has this URL';
const JSON_TYPE = 'application/json; charset=utf-8';
const PROBLEM_TYPE = 'application/problem+json; charset=utf-8';
const WINDOW_MS = 60_000;

/**
 * Whether a request is the inbound webhook's: every POST to /v1/webhooks/in or below it,
 * whatever its token looks like (empty, over-long, with slashes: all answered 404
 * webhook_not_found after the per-address limit counted them).
 */
export function isWebhookRequest(method: string | undefined, url: string | undefined): boolean {
  if (method !== 'POST' || !url?.startsWith(WEBHOOK_PREFIX)) return false;
  const next = url.charCodeAt(WEBHOOK_PREFIX.length);
  // End, '/', '?'
  return Number.isNaN(next) || next === 47 || next === 63;
}

/**
 * A header's value as the text its sender wrote: Node reads header bytes as Latin-1, so a
 * UTF-8 key (`é`, two bytes) arrived as two characters (`Ã©`), counted and stored so. Bytes
 * that are not UTF-8 stay as Node read them, so that a key is still compared byte for byte.
 */
export function headerText(value: string): string {
  if (!/[\x80-\xff]/.test(value)) return value;
  const bytes = Buffer.from(value, 'latin1');
  return isUtf8(bytes) ? bytes.toString('utf8') : value;
}

/** The token of a webhook URL: its one path segment below the prefix, decoded; '' when there is none; null when it cannot be decoded. */
export function webhookToken(url: string): string | null {
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  const segment = path.slice(WEBHOOK_PREFIX.length + 1);
  if (path.length <= WEBHOOK_PREFIX.length + 1 || segment.length > MAX_TOKEN_LENGTH || segment.includes('/')) return '';
  if (!segment.includes('%')) return segment;
  try {
    return decodeURIComponent(segment);
  } catch {
    return null;
  }
}

interface LimitStore {
  incr(key: string, cb: (err: Error | null, result: { current: number; ttl: number } | null) => void, timeWindow: number, max: number): void;
}

/** What the per-address limit says of one request: its headers, and whether it is over. */
interface Limit {
  headers: Record<string, string>;
  exceeded: boolean;
  retryAfter: number;
}

/**
 * The per-address limit of the inbound webhook: a window of a minute per client address,
 * counted on this node or, with Redis, across the cluster's nodes (sharedLimits.ts). The
 * counting is @fastify/rate-limit's own store, so the headers say what that plugin says.
 */
class WebhookLimit {
  private readonly store: LimitStore;

  constructor(
    private readonly max: number,
    redis: SharedRedis | undefined,
  ) {
    this.store = redis ? new (sharedLimitStore(redis, 'webhook-limit'))({}) : new LocalStore(false, false);
  }

  take(address: string, then: (limit: Limit) => void, fail: (err: Error) => void): void {
    this.store.incr(
      address,
      (err, result) => {
        if (err || !result) return fail(err ?? new Error('the rate-limit store gave no count'));
        const reset = Math.ceil(result.ttl / 1000);
        const exceeded = result.current > this.max;
        then({
          headers: {
            'x-ratelimit-limit': String(this.max),
            'x-ratelimit-remaining': String(exceeded ? 0 : Math.max(0, this.max - result.current)),
            'x-ratelimit-reset': String(reset),
            ...(exceeded ? { 'retry-after': String(reset) } : {}),
          },
          exceeded,
          retryAfter: reset,
        });
      },
      WINDOW_MS,
      this.max,
    );
  }
}

export interface WebhookIngressDeps {
  config: Config;
  receiver: WebhookReceiver;
  readiness: Readiness;
  storage?: StorageHealth | undefined;
  metrics?: Metrics | undefined;
  redis?: SharedRedis | undefined;
  log: FastifyBaseLogger;
  /** The request id: the client's X-Request-Id when it is well formed, else a new one (buildApp's genReqId). */
  requestId: (req: IncomingMessage) => string;
  /** Fastify's trustProxy option, as buildApp computed it. */
  trustProxy: false | string[] | ((address: string, hop: number) => boolean);
  /** Whether a workspace is a sandbox (only asked when the sandbox has an address of its own). */
  isSandbox?: ((workspaceId: number) => Promise<boolean>) | undefined;
  /** Told of every accepted request that started a run (not of replays). */
  onAccepted?: (() => void) | undefined;
}

/** When Fastify routed the request (app.inject): it logs, counts and answers 503 while closing itself. */
export interface RoutedBy {
  id: string;
  log: FastifyBaseLogger;
  /** Told what was answered, for Fastify's own onResponse hooks (the metrics). */
  answered(problemCode: string | null, headers: Record<string, string>): void;
}

/** One request on its way through the ingress. */
interface Exchange {
  req: IncomingMessage;
  res: ServerResponse;
  id: string;
  /** The request's logger, made when something is logged (see logging.ts). */
  log: FastifyBaseLogger | undefined;
  started: number;
  routed: RoutedBy | undefined;
  headers: Record<string, string>;
  address: string;
  problemCode: string | null;
  /** Whether its lines are logged here (at info, when Fastify did not route it). */
  logged: boolean;
}

/**
 * POST /v1/webhooks/in/:token, answered on node:http directly, not through Fastify's request
 * cycle: the one route every third-party sender hits, at rates no other route sees, where
 * Fastify's request and reply objects, hooks, body parser and serializer cost about a fifth
 * of the CPU of an accepted request (README, Benchmark). Everything the contract says of the
 * route is kept here, in the contract's order: 503 while closing, the per-address limit
 * (429), the token (404), Content-Type (415), body size (413), then in the receiver the
 * signature (401), Idempotency-Key (400), JSON (400), object (422), lookup (422), contact
 * (404), and 202 after COMMIT. Every answer has the request id and security headers every
 * Fastify route has, problems are RFC 9457 bodies, and requests are logged and counted in
 * the metrics as Fastify would. The body is read as raw bytes so that the signature covers
 * exactly what was sent. Fastify still has the route (the OpenAPI document, app.inject):
 * it hands the request here (see webhookRoutes).
 */
export class WebhookIngress {
  private readonly limit: WebhookLimit;
  private readonly trust: ((address: string, hop: number) => boolean) | undefined;
  private readonly onSandboxAddress: (host: string | undefined) => boolean;
  private readonly isSandbox: ((workspaceId: number) => Promise<boolean>) | undefined;
  private readonly bodyLimit: number;

  constructor(private readonly deps: WebhookIngressDeps) {
    this.limit = new WebhookLimit(deps.config.webhookRateLimit, deps.redis);
    const { trustProxy } = deps;
    this.trust = trustProxy === false ? undefined : typeof trustProxy === 'function' ? trustProxy : proxyAddr.compile(trustProxy);
    // With a sandbox address of its own, a sandbox workflow's URL answers only there and a
    // live one's only on the main address: a sender pointed at the sandbox never starts a live run.
    this.isSandbox = hasSandboxAddress(deps.config) ? deps.isSandbox : undefined;
    this.onSandboxAddress = sandboxHostMatcher(deps.config);
    this.bodyLimit = deps.config.webhookBodyLimit;
  }

  /**
   * Answers one webhook request; `routed` when Fastify routed it (app.inject) rather than the
   * server. Never throws: this runs in the server's request listener, where a throw would
   * take the process down (Fastify's own handlers catch theirs).
   */
  handle(req: IncomingMessage, res: ServerResponse, routed?: RoutedBy): void {
    let x: Exchange;
    try {
      const id = routed?.id ?? this.deps.requestId(req);
      x = {
        req,
        res,
        id,
        log: routed?.log,
        started: routed ? 0 : performance.now(),
        routed,
        headers: { 'x-request-id': id, ...SECURITY_HEADERS },
        address: this.clientAddress(req),
        problemCode: null,
        logged: !routed && this.logsRequests,
      };
    } catch (err) {
      (routed?.log ?? this.deps.log).error({ err }, 'webhook failed');
      res.destroy();
      return;
    }
    try {
      this.begin(x);
    } catch (err) {
      this.fail(x, err);
    }
  }

  private begin(x: Exchange): void {
    const { req } = x;
    if (x.logged) this.log(x).info({ req: { method: req.method, url: req.url, ip: x.address, id: x.id } }, 'incoming request');
    if (!x.routed && this.deps.readiness.shuttingDown) {
      x.headers.connection = 'close';
      x.headers['retry-after'] = '5';
      return this.sendProblem(x, problem(503, 'shutting_down', 'The server is shutting down; retry on another node or in a moment'));
    }
    const token = webhookToken(req.url ?? '');
    if (token === null) return this.sendProblem(x, problem(400, 'bad_url', 'The URL could not be decoded'));
    this.limit.take(
      x.address,
      (limit) => {
        try {
          this.limited(x, token, limit);
        } catch (err) {
          this.fail(x, err);
        }
      },
      (err) => this.fail(x, err),
    );
  }

  /** After the per-address limit counted the request: 429, or on to the token and the body. */
  private limited(x: Exchange, token: string, limit: Limit): void {
    Object.assign(x.headers, limit.headers);
    if (limit.exceeded) {
      const detail = `More than ${this.deps.config.webhookRateLimit} webhook requests a minute from this address; retry after ${limit.retryAfter} s`;
      return this.fail(x, new AppError(429, 'rate_limited', detail));
    }
    // Most requests: an active workflow already cached, no sandbox address to check.
    const cached = this.isSandbox ? undefined : this.deps.receiver.admitCached(token, this.head(x.req));
    if (cached) return this.readBody(x, cached);
    this.admit(x, token).catch((err: unknown) => this.fail(x, err));
  }

  private log(x: Exchange): FastifyBaseLogger {
    x.log ??= this.deps.log.child({ reqId: x.id });
    return x.log;
  }

  /** Whether requests are logged, as Fastify logs them: at info (the null logger of `logger: false` has no levels). */
  private get logsRequests(): boolean {
    const log = this.deps.log as FastifyBaseLogger & { isLevelEnabled?: (level: string) => boolean };
    return typeof log.isLevelEnabled === 'function' && log.isLevelEnabled('info');
  }

  /** The client's address: the socket's peer, or with trusted proxies the address the last trusted one saw. */
  private clientAddress(req: IncomingMessage): string {
    if (!this.trust) return req.socket.remoteAddress ?? '';
    const all = proxyAddr.all(req, this.trust);
    return all[all.length - 1] ?? '';
  }

  /** The Host the client asked for: X-Forwarded-Host only from a trusted proxy. */
  private host(req: IncomingMessage): string {
    // Node joins a repeated X-Forwarded-Host with commas: the last entry is the nearest proxy's.
    const forwarded = req.headers['x-forwarded-host'] as string | undefined;
    if (forwarded && this.trust && req.socket.remoteAddress !== undefined && this.trust(req.socket.remoteAddress, 0)) {
      const last = forwarded.lastIndexOf(',');
      return last === -1 ? forwarded.trim() : forwarded.slice(last + 1).trim();
    }
    return req.headers.host ?? '';
  }

  private received(x: Exchange, raw: Buffer | null): ReceivedRequest {
    const { headers } = x.req;
    const signature = headers[SIGNATURE_HEADER];
    const key = headers['idempotency-key'];
    return {
      raw,
      contentType: headers['content-type'] ?? null,
      sourceIp: x.address,
      signature: typeof signature === 'string' ? signature : undefined,
      idempotencyKey: typeof key === 'string' ? headerText(key) : undefined,
    };
  }

  private head(req: IncomingMessage): RequestHead {
    const length = Number(req.headers['content-length']);
    return {
      contentType: req.headers['content-type'] ?? null,
      contentLength: Number.isFinite(length) ? length : null,
      contentEncoding: req.headers['content-encoding'],
    };
  }

  private async admit(x: Exchange, token: string): Promise<void> {
    // An empty token is one no workflow has: admit answers 404 like any unknown one.
    const target = await this.deps.receiver.admit(token, this.head(x.req), this.received(x, null));
    if (this.isSandbox && (await this.isSandbox(target.workspaceId)) !== this.onSandboxAddress(this.host(x.req))) {
      throw new AppError(404, 'webhook_not_found', NOT_FOUND);
    }
    this.readBody(x, target);
  }

  /**
   * Reads the body as bytes, at most the webhook body limit (413, recorded against the
   * workflow); a body that ends short of its Content-Length, or a client that goes away
   * while sending, is answered 400 like Fastify's parser answers it.
   */
  private readBody(x: Exchange, target: WebhookTarget): void {
    const { req } = x;
    const declared = Number(req.headers['content-length']);
    const chunks: Buffer[] = [];
    let received = 0;
    const done = (err: AppError | null) => {
      req.removeListener('data', onData);
      req.removeListener('end', onEnd);
      req.removeListener('error', onError);
      if (err) {
        // The client may still be sending: the connection is closed after the answer.
        x.headers.connection = 'close';
        return this.refuseUnread(x, target, err);
      }
      const raw = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, received);
      this.deps.receiver.receive(target, { ...this.received(x, raw), raw }).then(
        (accepted) => this.accepted(x, accepted),
        (e: unknown) => this.fail(x, e),
      );
    };
    const onData = (chunk: Buffer) => {
      received += chunk.length;
      if (received > this.bodyLimit) return done(this.deps.receiver.tooLarge());
      chunks.push(chunk);
    };
    const onEnd = () => {
      if (!Number.isNaN(declared) && received !== declared) {
        return done(new AppError(400, 'bad_request', 'The request could not be read'));
      }
      done(null);
    };
    const onError = () => done(new AppError(400, 'bad_request', 'The request could not be read'));
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
  }

  /** A body refused before it was read in full: a 413 is recorded against the workflow, then answered. */
  private refuseUnread(x: Exchange, target: WebhookTarget, error: AppError): void {
    if (error.status !== 413) return this.fail(x, error);
    this.deps.receiver.refuse(target, error, this.received(x, null)).then(
      () => this.fail(x, error),
      (recordErr: unknown) => {
        this.log(x).error({ err: recordErr }, 'could not record a refused webhook');
        this.fail(x, error);
      },
    );
  }

  private accepted(x: Exchange, accepted: Accepted): void {
    if (accepted.replayed) x.headers['idempotent-replayed'] = 'true';
    else {
      // The run is committed: whatever happens in waking the engine, the answer is 202.
      try {
        this.deps.onAccepted?.();
      } catch (err) {
        this.log(x).error({ err }, 'could not tell the engine of a queued run');
      }
    }
    this.send(x, 202, JSON_TYPE, `{"runId":${accepted.runId},"contactId":${accepted.contactId}}`);
  }

  /** Answers what went wrong: a refusal as its problem; a full disk 503; anything else 500, logged. */
  private fail(x: Exchange, err: unknown): void {
    if (err instanceof AppError) {
      if (err.headers) Object.assign(x.headers, err.headers);
      return this.sendProblem(x, problem(err.status, err.code, err.message, err.errors));
    }
    if (this.deps.storage?.noteFailure(err)) {
      x.headers['retry-after'] = String(STORAGE_FULL_RETRY_AFTER);
      return this.sendProblem(x, problem(503, 'storage_full', 'The server is out of disk space; nothing of this request was kept. Retry later'));
    }
    this.log(x).error({ err }, 'webhook failed');
    this.sendProblem(x, problem(500, 'internal_error', 'An internal error occurred; retry with backoff'));
  }

  private sendProblem(x: Exchange, p: Problem): void {
    x.problemCode = p.code;
    this.send(x, p.status, PROBLEM_TYPE, JSON.stringify(p));
  }

  private send(x: Exchange, status: number, type: string, body: string): void {
    const { res } = x;
    if (res.headersSent || res.destroyed) return;
    x.headers['content-type'] = type;
    x.headers['content-length'] = String(Buffer.byteLength(body));
    // Before the answer is written: with app.inject, Fastify's onResponse hooks run within end().
    x.routed?.answered(x.problemCode, x.headers);
    try {
      res.writeHead(status, x.headers);
      res.end(body);
    } catch (err) {
      // Only a header the client sent back could be malformed here; nothing to answer with.
      this.log(x).error({ err }, 'webhook answer failed');
      res.destroy();
    }
    if (x.routed) return;
    const seconds = (performance.now() - x.started) / 1000;
    this.deps.metrics?.observe('POST', WEBHOOK_ROUTE, status, seconds, {
      problemCode: x.problemCode,
      getHeader: (name: string) => x.headers[name],
    });
    if (x.logged) this.log(x).info({ res: { statusCode: status }, responseTime: seconds * 1000 }, 'request completed');
  }
}
