import rateLimit, { type FastifyRateLimitStoreCtor } from '@fastify/rate-limit';
import type { SharedRedis } from '../../core/redis.js';
import { sharedLimitStore } from '../sharedLimits.js';
import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import type { Config } from '../../core/config.js';
import type { StorageHealth } from '../../core/db/storage.js';
import { AppError } from '../../core/errors.js';
import { hasSandboxAddress, sandboxHostMatcher } from '../../core/services/sandbox.js';
import { SIGNATURE_HEADER, type ReceivedRequest, type WebhookReceiver, type WebhookTarget } from '../../core/services/webhooks.js';
import type { App } from '../app.js';
import { problem, sendProblem, sendStorageFull } from '../plugins/errors.js';
import { RunStarted } from '../schemas.js';

declare module 'fastify' {
  interface FastifyRequest {
    webhookTarget?: WebhookTarget;
  }
}

function received(req: FastifyRequest, raw: Buffer | null): ReceivedRequest {
  const signature = req.headers[SIGNATURE_HEADER];
  const key = req.headers['idempotency-key'];
  return {
    raw,
    contentType: req.headers['content-type'] ?? null,
    sourceIp: req.ip,
    signature: typeof signature === 'string' ? signature : undefined,
    idempotencyKey: typeof key === 'string' ? key : undefined,
  };
}

/**
 * POST /v1/webhooks/in/:token. Checks run in the contract's order: per-IP rate limit (429),
 * token (404), Content-Type (415), body size (413), then in the receiver signature (401),
 * Idempotency-Key (400), JSON (400), object (422), lookup (422), contact (404) and finally
 * 202 after COMMIT. An empty, over-long or multi-segment token is routed here too (see
 * webhookUrlForRouting in app.ts), so it is counted and answered like any unknown token.
 * The body is taken as raw bytes so the signature covers exactly what was sent.
 */
export async function webhookRoutes(
  app: App,
  opts: {
    config: Config;
    receiver: WebhookReceiver;
    onAccepted?: () => void;
    storage?: StorageHealth;
    isSandbox?: (workspaceId: number) => Promise<boolean>;
    redis?: SharedRedis | undefined;
  },
): Promise<void> {
  const { config, receiver } = opts;
  // With a sandbox address of its own, a sandbox workflow's URL answers only there and a live
  // one's only on the main address: a sender pointed at the sandbox never starts a live run.
  const isSandbox = hasSandboxAddress(config) ? opts.isSandbox : undefined;
  const onSandboxAddress = sandboxHostMatcher(config);
  const otherSide = async (target: WebhookTarget, host: string): Promise<boolean> =>
    !!isSandbox && (await isSandbox(target.workspaceId)) !== onSandboxAddress(host);

  await app.register(rateLimit, {
    global: false,
    // Counted across the cluster's nodes in Redis when it is configured (sharedLimits.ts).
    // (The plugin calls incr with the window and the limit too; its types leave them out.)
    ...(opts.redis ? { store: sharedLimitStore(opts.redis, 'webhook-limit') as unknown as FastifyRateLimitStoreCtor } : {}),
    errorResponseBuilder: (_req, ctx) =>
      new AppError(429, 'rate_limited', `More than ${ctx.max} webhook requests a minute from this address; retry after ${Math.ceil(ctx.ttl / 1000)} s`),
  });

  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: config.webhookBodyLimit }, (_req, body, done) => done(null, body));

  // Refusals of a known token are recorded against its workflow before they are answered;
  // admit() and receive() record their own, this catches what the body parser throws.
  app.setErrorHandler(async (err: Error & { code?: string; statusCode?: number }, req, reply) => {
    let error: AppError;
    if (err instanceof AppError) error = err;
    else if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE') error = receiver.tooLarge();
    else if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500)
      error = new AppError(err.statusCode, 'bad_request', 'The request could not be read');
    else if (opts.storage?.noteFailure(err)) return sendStorageFull(reply);
    else {
      req.log.error({ err }, 'webhook failed');
      return sendProblem(reply, problem(500, 'internal_error', 'An internal error occurred; retry with backoff'));
    }
    if (req.webhookTarget && err.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      try {
        await receiver.refuse(req.webhookTarget, error, received(req, null));
      } catch (recordErr) {
        req.log.error({ err: recordErr }, 'could not record a refused webhook');
      }
    }
    return sendProblem(reply, problem(error.status, error.code, error.message, error.errors), error.headers);
  });

  app.post(
    '/v1/webhooks/in/:token',
    {
      bodyLimit: config.webhookBodyLimit,
      config: { access: 'public', rateLimit: { max: config.webhookRateLimit, timeWindow: 60_000 } },
      schema: { params: Type.Object({ token: Type.String() }), response: { 202: RunStarted } },
      // Runs after the rate limit (onRequest) and before the body is read.
      preParsing: async (req, _reply, payload) => {
        const length = Number(req.headers['content-length']);
        const target = await receiver.admit(
          (req.params as { token: string }).token,
          { contentType: req.headers['content-type'] ?? null, contentLength: Number.isFinite(length) ? length : null },
          received(req, null),
        );
        if (await otherSide(target, req.host)) throw new AppError(404, 'webhook_not_found', 'No active webhook workflow has this URL');
        req.webhookTarget = target;
        return payload;
      },
    },
    async (req, reply) => {
      const target = req.webhookTarget!;
      const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
      // The signature comes before the Idempotency-Key check (API.md section 4): see receive().
      const accepted = await receiver.receive(target, { ...received(req, raw), raw });
      if (accepted.replayed) reply.header('idempotent-replayed', 'true');
      else opts.onAccepted?.();
      return reply.code(202).send({ runId: accepted.runId, contactId: accepted.contactId });
    },
  );
}
