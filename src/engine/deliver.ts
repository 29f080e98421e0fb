import { setTimeout as sleep } from 'node:timers/promises';
import { recordAudit } from '../core/audit.js';
import type { Config } from '../core/config.js';
import { withTransaction, type WorkspaceContext } from '../core/context.js';
import type { Store } from '../core/db/store.js';
import type { Db } from '../core/db/connection.js';
import type { Channel, DeliveryStatus } from '../core/db/schema.js';
import { ValidationError, type FieldError } from '../core/errors.js';
import { ChannelUnusableError, resolveChannel, type ResolvedChannel } from '../core/services/channels.js';
import { createAttempt, emailTemplateContent, markAttempt, markAttemptSending, STOPPED_BEFORE_SENDING } from '../core/services/deliveries.js';
import { getWorkspace } from '../core/services/workspaces.js';
import { jsonDepthExceeds, MAX_JSON_DEPTH, normalizeEmail } from '../core/validation.js';
import { countDelivery } from './counters.js';
import { outboundPolicyFrom, type OutboundPolicy } from './outbound.js';
import { providerFor, type SendResult } from './providers/index.js';
import { RenderError, renderContent } from './render.js';

export interface DeliverDeps {
  db: Db;
  /** Each attempt row is written in a transaction of its own. */
  store: Store;
  config: Config;
  /**
   * Called after the row is marked SENDING and before the provider is called: a caller
   * that batches writes in an open transaction commits here, so the row is durable (a
   * crash during the send leaves evidence) and no lock is held across the network.
   */
  beforeNetwork?: () => void;
  /** Called once the attempt row exists (QUEUED, or SENT/FAILED when no send was needed). */
  onRecorded?: (attemptId: number, status: DeliveryStatus) => void;
}

export interface DeliveryInput {
  workspaceId: number;
  channel: Channel;
  to: string;
  rendered: Record<string, unknown>;
  runId?: number | undefined;
  stepIndex?: number | undefined;
  templateId?: number | undefined;
  /** 1 for the first try of this message; each retry is a new row with the next number. */
  attempt: number;
  /**
   * Secrets the message carries to its recipient (an invitation token, a reset link's
   * token): sent as they are, but the stored copy on the attempt row has each replaced by
   * REDACTED, so no reader of delivery attempts ever sees them.
   */
  secrets?: readonly string[] | undefined;
}

/** What a secret of a system email looks like in the stored copy of the message. */
export const REDACTED = '[redacted]';

/**
 * A copy of rendered content with every occurrence of each secret replaced by REDACTED,
 * in every string at any depth. Secrets shorter than 8 characters are refused: replacing
 * a short one would mangle ordinary text, and a secret that short is no secret.
 */
export function redactSecrets<T>(value: T, secrets: readonly string[] | undefined): T {
  if (!secrets?.length) return value;
  for (const s of secrets) if (s.length < 8) throw new Error('a secret to redact must be at least 8 characters long');
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') return secrets.reduce((text, secret) => text.split(secret).join(REDACTED), v);
    if (Array.isArray(v)) return v.map(walk);
    if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, item]) => [k, walk(item)]));
    return v;
  };
  return walk(value) as T;
}

export interface DeliveryOutcome {
  attemptId: number;
  status: 'SENT' | 'FAILED';
  transient: boolean;
  error?: string;
  /** The provider asked to be called again no sooner than this (a rate-limit answer). */
  retryAfterMs?: number;
}

const HOUR_MS = 3_600_000;

/** The outbound policy of a configuration (where sends may connect), built once per config. */
const policies = new WeakMap<Config, OutboundPolicy>();
function outboundOf(config: Config): OutboundPolicy {
  let policy = policies.get(config);
  if (!policy) {
    policy = outboundPolicyFrom(config);
    policies.set(config, policy);
  }
  return policy;
}

/**
 * One try of one message through the workspace's provider for its channel, recorded as a
 * delivery attempt row. The row is written as SENDING before the provider is called and
 * marked SENT or FAILED after; the outbox (nothing to call) writes it SENT at once.
 */
export async function deliverOnce(deps: DeliverDeps, input: DeliveryInput, signal?: AbortSignal): Promise<DeliveryOutcome> {
  const { config } = deps;
  const row = {
    workspaceId: input.workspaceId,
    channel: input.channel,
    to: input.to,
    attempt: input.attempt,
    rendered: redactSecrets(input.rendered, input.secrets),
    runId: input.runId,
    stepIndex: input.stepIndex,
    templateId: input.templateId,
  };

  let channel: ResolvedChannel;
  try {
    channel = await resolveChannel(deps.db, config, input.workspaceId, input.channel);
  } catch (err) {
    if (!(err instanceof ChannelUnusableError)) throw err;
    const failed = await createAttempt(deps, { ...row, provider: err.provider, status: 'FAILED', error: err.message });
    deps.onRecorded?.(failed.id, 'FAILED');
    countDelivery(input.channel, err.provider, 'FAILED');
    return { attemptId: failed.id, status: 'FAILED', transient: false, error: err.message };
  }

  const provider = providerFor(channel.provider);
  const message = { channel: input.channel, to: input.to, rendered: input.rendered };
  const opts = { timeoutMs: config.httpTimeoutMs, outbound: outboundOf(config) };

  if (channel.provider === 'outbox') {
    const result = await provider.send(message, channel.settings, channel.credentials, opts);
    const providerMessageId = result.ok ? result.providerMessageId : null;
    const sent = await createAttempt(deps, { ...row, provider: 'outbox', status: 'SENT', providerMessageId });
    deps.onRecorded?.(sent.id, 'SENT');
    countDelivery(input.channel, 'outbox', 'SENT');
    return { attemptId: sent.id, status: 'SENT', transient: false };
  }

  // The row is written QUEUED at once (a test email's 202 names it) and marked SENDING once
  // the message has its turn, right before it leaves: one still waiting when the process
  // stops was never sent, and says so when it is settled (settleAbandonedSends).
  const attempt = await createAttempt(deps, { ...row, provider: channel.provider, status: 'QUEUED' });
  deps.onRecorded?.(attempt.id, 'QUEUED');
  // Once the server is stopping, a message that gets its turn no longer starts.
  const stopping = new Error('stopping');
  const onStart = async () => {
    if (signal?.aborted) throw stopping;
    await markAttemptSending(deps, attempt.id);
    deps.beforeNetwork?.();
  };
  let result: SendResult;
  try {
    result = await provider.send(message, channel.settings, channel.credentials, { ...opts, onStart });
  } catch (err) {
    if (err === stopping) {
      await markAttempt(deps, attempt.id, { status: 'FAILED', error: STOPPED_BEFORE_SENDING });
      return { attemptId: attempt.id, status: 'FAILED', transient: false, error: STOPPED_BEFORE_SENDING };
    }
    // Providers answer rather than throw; this is a bug, but the message may deserve a retry.
    result = { ok: false, transient: true, error: `${channel.provider}: unexpected error: ${(err as Error).message ?? String(err)}` };
  }
  countDelivery(input.channel, channel.provider, result.ok ? 'SENT' : 'FAILED');
  if (result.ok) {
    await markAttempt(deps, attempt.id, { status: 'SENT', providerMessageId: result.providerMessageId });
    return { attemptId: attempt.id, status: 'SENT', transient: false };
  }
  // A provider may quote the message back in its error (a refused recipient line, say).
  const error = input.secrets?.length ? secretSafeError(redactSecrets(result.error, input.secrets)) : result.error;
  await markAttempt(deps, attempt.id, { status: 'FAILED', error });
  return {
    attemptId: attempt.id,
    status: 'FAILED',
    transient: result.transient,
    error,
    ...(result.retryAfterMs !== undefined ? { retryAfterMs: result.retryAfterMs } : {}),
  };
}

/** The provider's own words in an error: an SMTP reply's text, an HTTP API's error message. */
const PROVIDER_WORDS_RE = /^([a-z]+: (?:the server answered|HTTP) \d{3})\b.+$/s;

/**
 * The error kept for a message that carries a secret (an invitation's token): the reply
 * code without the provider's words. A server may quote the message back in any encoding,
 * quoted-printable breaking the token across lines or base64 hiding it whole, which no
 * search for the secret finds; and readers of delivery attempts include VIEWERs.
 */
export function secretSafeError(error: string): string {
  return error.replace(PROVIDER_WORDS_RE, "$1 (the provider's reply is not kept: the message carried a secret)");
}

/**
 * How long to wait after try number `attempt` failed: base * 2^(attempt-1), with ±20%
 * jitter so that retries after an outage do not arrive together, at most one hour.
 */
export function retryDelayMs(config: Pick<Config, 'deliveryRetryBaseMs'>, attempt: number): number {
  const exponential = Math.min(HOUR_MS, config.deliveryRetryBaseMs * 2 ** Math.max(0, attempt - 1));
  const jittered = exponential * (0.8 + Math.random() * 0.4);
  return Math.min(HOUR_MS, Math.max(1, Math.round(jittered)));
}

/**
 * Tries a message until it is sent, fails permanently, or has used
 * config.deliveryMaxAttempts tries, waiting retryDelayMs between tries; each try is its
 * own attempt row. In-process, for messages outside runs (test emails): runs schedule
 * their retries durably instead. An abort stops the waiting and returns the last outcome.
 */
export async function deliverWithRetries(
  deps: DeliverDeps,
  input: Omit<DeliveryInput, 'attempt'>,
  opts: { signal?: AbortSignal } = {},
): Promise<DeliveryOutcome> {
  const max = deps.config.deliveryMaxAttempts;
  for (let attempt = 1; ; attempt++) {
    const outcome = await deliverOnce(deps, { ...input, attempt }, opts.signal);
    if (outcome.status === 'SENT' || !outcome.transient || attempt >= max || opts.signal?.aborted) return outcome;
    try {
      // A rate-limit answer says when to come back: never sooner than it asks.
      await sleep(
        Math.max(retryDelayMs(deps.config, attempt), Math.min(HOUR_MS, outcome.retryAfterMs ?? 0)),
        undefined,
        opts.signal ? { signal: opts.signal } : {},
      );
    } catch {
      return outcome;
    }
  }
}

export interface TestEmailInput {
  to: string;
  templateId?: number | undefined;
  subject?: string | undefined;
  html?: string | undefined;
  text?: string | undefined;
  /** Visible to the templates as `trigger.*`. */
  data?: Record<string, unknown> | undefined;
}

export interface TestEmailAccepted {
  deliveryAttemptId: number;
  status: DeliveryStatus;
}

/** The Liquid sources of a test email: an EMAIL template's content, or the given strings. */
async function testEmailSource(ctx: WorkspaceContext, input: TestEmailInput): Promise<Record<string, string>> {
  const inline = input.subject !== undefined || input.html !== undefined || input.text !== undefined;
  if (input.templateId !== undefined) {
    if (inline) {
      throw new ValidationError('validation_failed', 'Give a templateId, or subject with html or text, not both', [
        { path: '/templateId', message: 'cannot be combined with subject, html or text' },
      ]);
    }
    const content = await emailTemplateContent(ctx, input.templateId);
    const source: Record<string, string> = {};
    for (const field of ['subject', 'html', 'text'] as const) if (typeof content[field] === 'string') source[field] = content[field];
    return source;
  }
  const errors: FieldError[] = [];
  if (input.subject === undefined) errors.push({ path: '/subject', message: 'is required without a templateId' });
  if (input.html === undefined && input.text === undefined) errors.push({ path: '/html', message: 'html or text is required without a templateId' });
  if (errors.length) throw new ValidationError('validation_failed', 'The test email is invalid', errors);
  return {
    subject: input.subject!,
    ...(input.html !== undefined ? { html: input.html } : {}),
    ...(input.text !== undefined ? { text: input.text } : {}),
  };
}

/**
 * Renders a test email and starts sending it through the workspace's EMAIL channel, with
 * retries, in the background. Resolves once the first attempt row exists (accepted), with
 * `done` settling when the last try has been made.
 */
export async function startTestEmail(
  ctx: WorkspaceContext,
  input: TestEmailInput,
  opts: { signal?: AbortSignal; render?: typeof renderContent } = {},
): Promise<{ accepted: TestEmailAccepted; done: Promise<DeliveryOutcome> }> {
  const to = normalizeEmail(input.to);
  if (!to) throw new ValidationError('validation_failed', 'The test email is invalid', [{ path: '/to', message: 'must be an email address' }]);
  if (input.data !== undefined && jsonDepthExceeds(input.data, MAX_JSON_DEPTH))
    throw new ValidationError('validation_failed', 'The test email is invalid', [
      { path: '/data', message: `must nest at most ${MAX_JSON_DEPTH} levels deep` },
    ]);
  const source = await testEmailSource(ctx, input);
  const workspace = await getWorkspace(ctx, ctx.workspaceId);
  let rendered: Record<string, unknown>;
  try {
    rendered = await (opts.render ?? renderContent)(source, {
      contact: {},
      trigger: input.data ?? {},
      workspace: { id: workspace.id, name: workspace.name },
      run: null,
      extra: { data: input.data ?? {} },
    });
  } catch (err) {
    if (!(err instanceof RenderError)) throw err;
    const path = input.templateId !== undefined ? '/templateId' : (err.path ?? '/');
    throw new ValidationError('template_render_error', `The email could not be rendered: ${err.message}`, [{ path, message: err.message }]);
  }

  let accept!: (a: TestEmailAccepted) => void;
  let refuse!: (err: unknown) => void;
  const first = new Promise<TestEmailAccepted>((resolve, reject) => {
    accept = resolve;
    refuse = reject;
  });
  const deps: DeliverDeps = { db: ctx.db, store: ctx.store, config: ctx.config, onRecorded: (id, status) => accept({ deliveryAttemptId: id, status }) };
  const done = deliverWithRetries(deps, { workspaceId: ctx.workspaceId, channel: 'EMAIL', to, rendered, templateId: input.templateId }, opts);
  // A failure before the first row was written fails the request; later ones are the caller's to log.
  done.catch(refuse);
  const accepted = await first;
  await withTransaction(ctx, (tx) =>
    recordAudit(tx, {
      workspaceId: ctx.workspaceId,
      action: 'message.test_email_sent',
      target: { type: 'delivery_attempt', id: accepted.deliveryAttemptId },
      metadata: input.templateId !== undefined ? { templateId: input.templateId } : {},
    }),
  );
  return { accepted, done };
}
