import type { Channel, ProviderName } from '../../core/db/schema.js';
import {
  accountKey,
  acquireSlot,
  agentFor,
  blockDestination,
  checkLiteral,
  defaultOutboundPolicy,
  destinationKey,
  MAX_IN_THREAD_WAIT_MS,
  OutboundError,
  parseRetryAfter,
  portOf,
  waitUntilUnblocked,
  DEFAULT_RATE_LIMIT_DELAY_MS,
  type OutboundPolicy,
} from '../outbound.js';

/**
 * What the providers share: the send contract and the guarded HTTP call. The registry
 * (index.ts) imports the providers; the providers import this, never the registry.
 */
export interface OutgoingMessage {
  channel: Channel;
  to: string;
  rendered: Record<string, unknown>;
}

/**
 * A recipient phone number as the SMS and WhatsApp APIs are given it: E.164 and nothing
 * else. The engine normalises before it sends; a provider refuses anything else rather
 * than let the API guess what a formatted or empty number means.
 */
export const E164_RE = /^\+[1-9]\d{1,14}$/;

/**
 * A failure with `retryAfterMs` is a rate-limit answer: the destination asked to be called
 * again no sooner than that. It is transient, and not a failed try of the message: the
 * caller defers the send until then.
 */
export type SendResult = { ok: true; providerMessageId: string | null } | { ok: false; transient: boolean; error: string; retryAfterMs?: number };

export type SendFailure = SendResult & { ok: false };

export interface SendOptions {
  timeoutMs: number;
  /**
   * Where sends may connect (SVC_HTTP_ALLOW_PRIVATE, SVC_HTTP_ALLOWED_HOSTS) and how many
   * may be in flight to one destination. Default: the policy set with configureOutbound
   * (strict until then: no private, loopback or reserved address).
   */
  outbound?: OutboundPolicy;
  /**
   * Called once the message has its turn (a slot of its destination, a connection of its
   * SMTP pool), right before it leaves, and never when it does not leave (a refused
   * destination, a rate-limit block): a send recorded as under way (SENDING) then only ever
   * stands for one that may really have been made. When it throws, nothing is sent and the
   * send rejects with its error (the one case a provider throws).
   */
  onStart?: (() => Promise<void>) | undefined;
}

/** Takes a destination's slot and calls onStart; the slot is given back if onStart throws. */
export async function takeTurn(destination: string, cap: number, opts: SendOptions): Promise<() => void> {
  const release = await acquireSlot(destination, cap);
  try {
    await opts.onStart?.();
  } catch (err) {
    release();
    throw err;
  }
  return release;
}

export interface Provider {
  readonly name: ProviderName;
  send(msg: OutgoingMessage, settings: Record<string, unknown>, credentials: Record<string, unknown>, opts: SendOptions): Promise<SendResult>;
}

/** A reply of an HTTP provider API: status, the Retry-After header, and (when JSON) the parsed body. */
export interface ApiReply {
  status: number;
  json: unknown;
  text: string;
  retryAfter?: string | undefined;
}

/** Provider replies are read up to this size; an error text needs no more. */
const MAX_REPLY_BYTES = 64 * 1024;
/** Provider error messages stored in attempts are cut to this. */
const MAX_ERROR_TEXT = 200;

/** The send is refused by the outbound policy: permanent, the settings must change. */
export function refusedDestination(provider: ProviderName, err: OutboundError): SendFailure {
  return { ok: false, transient: false, error: `${provider}: destination refused by the outbound policy: ${err.message}` };
}

/** A deferral: the destination is rate limited for `ms` more. */
export function rateLimited(provider: ProviderName, ms: number, what = 'the provider asked to slow down'): SendFailure {
  return { ok: false, transient: true, retryAfterMs: ms, error: `${provider}: rate limited (${what}); retry in ${Math.max(1, Math.ceil(ms / 1000))} s` };
}

/** How long a rate-limit reply asks to wait: its Retry-After, else the default. */
export function retryAfterMsOf(reply: Pick<ApiReply, 'retryAfter'>): number {
  return parseRetryAfter(reply.retryAfter) ?? DEFAULT_RATE_LIMIT_DELAY_MS;
}

export interface ProviderCall {
  provider: ProviderName;
  url: string;
  headers: Record<string, string>;
  body: string;
  /** The credential that identifies the account: rate limits are per destination and account. */
  account: string;
  /**
   * Turns the reply into the send's result. A failure with retryAfterMs blocks the
   * destination and account in this thread for that long, unless `blockDestination` is false.
   */
  classify(reply: ApiReply): SendResult & { blockDestination?: boolean };
}

/**
 * One POST to a provider's HTTP API through the guarded connector and this thread's
 * keep-alive pool, with the per-destination cap and rate-limit blocks. No redirects are
 * followed. Never throws: network trouble is a transient failure, a refused destination a
 * permanent one.
 */
export async function callProviderApi(call: ProviderCall, opts: SendOptions): Promise<SendResult> {
  const policy = opts.outbound ?? defaultOutboundPolicy();
  let url: URL;
  try {
    url = new URL(call.url);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('protocol');
  } catch {
    return { ok: false, transient: false, error: `${call.provider}: the base URL is not an http(s) URL` };
  }
  const port = portOf(url);
  try {
    checkLiteral(url.hostname, port, policy);
  } catch (err) {
    return refusedDestination(call.provider, err as OutboundError);
  }
  const key = accountKey(url.origin, call.account);
  const left = await waitUntilUnblocked(key, MAX_IN_THREAD_WAIT_MS);
  if (left > 0) return rateLimited(call.provider, left, 'an earlier send was told to slow down');

  const release = await takeTurn(destinationKey(url.hostname, port), policy.perHostConcurrency, opts);
  let reply: ApiReply;
  try {
    reply = await postToProvider(url, call.headers, call.body, opts.timeoutMs, policy);
  } catch (err) {
    if (err instanceof OutboundError && err.code === 'blocked_address') return refusedDestination(call.provider, err);
    return networkFailure(call.provider, err);
  } finally {
    release();
  }
  const result = call.classify(reply);
  if (!result.ok && result.retryAfterMs !== undefined && result.blockDestination !== false) blockDestination(key, result.retryAfterMs);
  if (!result.ok) {
    const { blockDestination: _ignored, ...rest } = result;
    return rest;
  }
  return result;
}

/**
 * One POST to a provider's HTTP API, bounded by the timeout from connect to last byte, over
 * the thread's guarded keep-alive pool. Throws only for network problems, timeouts and
 * refused destinations (OutboundError with code blocked_address) before the status arrives;
 * after it, a broken or slow body is what arrived of it.
 */
export async function postToProvider(
  url: string | URL,
  headers: Record<string, string>,
  body: string,
  timeoutMs: number,
  policy: OutboundPolicy = defaultOutboundPolicy(),
): Promise<ApiReply> {
  const target = typeof url === 'string' ? new URL(url) : url;
  const res = await (await agentFor(policy, timeoutMs)).request({
    origin: target.origin,
    path: `${target.pathname}${target.search}`,
    method: 'POST',
    headers,
    body,
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    signal: AbortSignal.timeout(timeoutMs),
  });
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of res.body) {
      const buf = chunk as Buffer;
      size += buf.length;
      if (size > MAX_REPLY_BYTES) {
        chunks.push(buf.subarray(0, buf.length - (size - MAX_REPLY_BYTES)));
        res.body.destroy();
        break;
      }
      chunks.push(buf);
    }
  } catch {
    // The status came and then the connection broke (or the body timed out): the status says
    // what the provider did with the message. A 201 so cut off was taken for a network failure
    // and sent again, five times; it is the provider's answer, its body what arrived.
  }
  const text = Buffer.concat(chunks).toString('utf8');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  const retryAfter = res.headers['retry-after'];
  return { status: res.statusCode, json, text, retryAfter: Array.isArray(retryAfter) ? retryAfter[0] : retryAfter };
}

/** Rate limiting, timeouts and server errors may pass; other refusals will not. */
export function isTransientStatus(status: number): boolean {
  return status === 408 || status === 425 || status === 429 || status >= 500;
}

/** A network failure or timeout of an HTTP provider: always worth another try. */
export function networkFailure(provider: ProviderName, err: unknown): SendFailure {
  const e = err as { name?: string; code?: string; cause?: { code?: string } };
  const code = err instanceof OutboundError ? undefined : (e.code ?? e.cause?.code);
  const reason =
    e.name === 'TimeoutError' ||
    e.name === 'AbortError' ||
    (err instanceof OutboundError && err.code === 'timeout') ||
    code === 'UND_ERR_HEADERS_TIMEOUT' ||
    code === 'UND_ERR_BODY_TIMEOUT' ||
    code === 'UND_ERR_CONNECT_TIMEOUT'
      ? 'timed out'
      : `could not be reached${code && /^[A-Z0-9_]+$/.test(code) ? ` (${code})` : ''}`;
  return { ok: false, transient: true, error: `${provider}: the provider API ${reason}` };
}

/**
 * A provider's own error text, made safe to store: one line, at most 200 characters.
 * Only the provider's error fields go through here, never a raw body or banner.
 */
export function errorText(text: string, max = MAX_ERROR_TEXT): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what this removes
  const line = text.replace(/[\u0000-\u001f\u007f\s]+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/** Kept for callers of the old name: a short single-line text. */
export const excerpt = errorText;
