import type { Config } from '../core/config.js';
import { maskUrlPath } from '../core/steps.js';
import {
  accountKey,
  acquireSlot,
  agentFor,
  blockDestination,
  checkLiteral,
  DEFAULT_PER_HOST_CONCURRENCY,
  DEFAULT_RATE_LIMIT_DELAY_MS,
  destinationKey,
  guardedConnector,
  loadUndici,
  portOf,
  MAX_IN_THREAD_WAIT_MS,
  OutboundError,
  parseRetryAfter,
  waitUntilUnblocked,
  type HostLookup,
  type OutboundPolicy,
} from './outbound.js';

export { isBlockedAddress, type HostLookup } from './outbound.js';

/**
 * The outbound HTTP client of the http_request step (and of anything else that calls a URL
 * a workspace chose), hardened against SSRF.
 *
 * - Only http: and https: URLs without credentials.
 * - Connections go through the guarded connector of outbound.ts: the host name is
 *   resolved once where the socket is opened, refused when ANY address is private,
 *   loopback, link-local or otherwise special, and the socket opens to the address that
 *   was checked (no DNS rebinding between check and connect). TLS keeps SNI and
 *   certificate checks on the host name; the Host header stays the URL's.
 * - Connections are kept alive and reused (one Agent per policy in this thread); at most
 *   perHostConcurrency requests are in flight to one host:port, more wait in line.
 * - A 429 (or a 503 with Retry-After) blocks that origin and account for the time named
 *   (Retry-After seconds or date; 2 s when none): the response carries retryAfterMs, and
 *   later requests to it wait (up to 10 s) or fail with rate_limited and retryAfterMs.
 * - Redirects are followed here, one hop at a time, each through the same connector.
 * - One deadline (timeoutMs) covers the whole exchange, redirects and body included.
 * - A response body larger than maxResponseBytes fails with too_large; at most one network
 *   chunk past the limit is read, and only maxResponseBytes are ever kept.
 */

export interface HttpPolicy {
  /** Let every address through (a development setting). */
  allowPrivate: boolean;
  /** Lower-case "host:port" pairs allowed even when they resolve to refused addresses. */
  allowedHosts: readonly string[];
  timeoutMs: number;
  maxResponseBytes: number;
  /** Redirects followed at most (default 5); one more fails with too_many_redirects. */
  maxRedirects?: number;
  /** Requests in flight to one host:port from this thread (default 64); more wait in FIFO order. */
  perHostConcurrency?: number;
}

export function httpPolicyFrom(
  config: Pick<Config, 'httpAllowPrivate' | 'httpAllowedHosts' | 'httpTimeoutMs' | 'httpMaxResponseBytes'> &
    Partial<Pick<Config, 'outboundPerHostConcurrency'>>,
): HttpPolicy {
  return {
    allowPrivate: config.httpAllowPrivate,
    allowedHosts: [...config.httpAllowedHosts],
    timeoutMs: config.httpTimeoutMs,
    maxResponseBytes: config.httpMaxResponseBytes,
    maxRedirects: DEFAULT_MAX_REDIRECTS,
    perHostConcurrency: config.outboundPerHostConcurrency ?? DEFAULT_PER_HOST_CONCURRENCY,
  };
}

export type HttpRequestErrorCode = 'blocked_address' | 'invalid_url' | 'timeout' | 'too_large' | 'too_many_redirects' | 'network' | 'rate_limited';

export class HttpRequestError extends Error {
  readonly code: HttpRequestErrorCode;
  /** With rate_limited: when the destination may be called again. */
  readonly retryAfterMs: number | undefined;
  constructor(code: HttpRequestErrorCode, message: string, options?: { cause?: unknown; retryAfterMs?: number }) {
    super(message, options?.cause !== undefined ? { cause: options.cause } : undefined);
    this.name = 'HttpRequestError';
    this.code = code;
    this.retryAfterMs = options?.retryAfterMs;
  }
}

export interface HttpRequest {
  method: string;
  url: string;
  headers?: Record<string, string>;
  body?: string | undefined;
}

export interface HttpResponse {
  status: number;
  /** Lower-case names; repeated headers joined with ", ". */
  headers: Record<string, string>;
  /** The body decoded as UTF-8. */
  body: string;
  /** Always false: a body over maxResponseBytes fails with too_large instead of being cut. */
  truncated: boolean;
  /** The URL that answered, after redirects. */
  url: string;
  /**
   * Set when the answer says "slow down": a 429 (Retry-After, else 2 s) or a 503 with
   * Retry-After. The caller should try again no sooner than this.
   */
  retryAfterMs?: number;
}

export interface SafeRequestOptions {
  /** Replaces dns.lookup({all: true}); for tests and special resolvers (a private Agent is used). */
  lookup?: HostLookup;
}

const DEFAULT_MAX_REDIRECTS = 5;
const USER_AGENT = 'svc-http/1';
const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);
/** Hop-by-hop headers, headers the client computes itself, and ones undici refuses. */
const STRIPPED_HEADERS = new Set([
  'host',
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'content-length',
  'expect',
  'user-agent',
  'http2-settings',
]);
/** Dropped when a redirect turns the request into a GET without body (Fetch, "request-body-header name"). */
const BODY_HEADERS = ['content-type', 'content-encoding', 'content-language', 'content-location'];
/** Dropped when a redirect leaves the origin. */
const CREDENTIAL_HEADERS = ['authorization', 'cookie', 'proxy-authorization'];
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const BAD_VALUE = /[\r\n\0]/;

// ---------------------------------------------------------------------------------------
// URL and header checks

function parseTarget(raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new HttpRequestError('invalid_url', `not an absolute URL: ${JSON.stringify(maskUrlPath(raw.slice(0, 200)))}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new HttpRequestError('invalid_url', `only http: and https: URLs are allowed, not ${url.protocol}`);
  if (url.username !== '' || url.password !== '')
    throw new HttpRequestError('invalid_url', 'URLs with credentials (user:pass@) are not allowed; send an Authorization header instead');
  if (url.hostname === '') throw new HttpRequestError('invalid_url', 'the URL has no host');
  return url;
}

function cleanHeaders(input: Record<string, string> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  const entries = Object.entries(input ?? {});
  const dropped = new Set<string>();
  for (const [name, value] of entries) {
    if (name.toLowerCase() === 'connection') for (const t of String(value).split(',')) dropped.add(t.trim().toLowerCase());
  }
  for (const [name, rawValue] of entries) {
    const value = String(rawValue);
    if (!TOKEN.test(name)) throw new HttpRequestError('invalid_url', `invalid header name ${JSON.stringify(name)}`);
    if (BAD_VALUE.test(value)) throw new HttpRequestError('invalid_url', `header ${name} contains a line break or NUL`);
    const lower = name.toLowerCase();
    if (STRIPPED_HEADERS.has(lower) || dropped.has(lower)) continue;
    out[lower] = value;
  }
  out['user-agent'] = USER_AGENT;
  return out;
}

// ---------------------------------------------------------------------------------------
// The request

function flattenHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) {
    if (v === undefined) continue;
    out[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : v;
  }
  return out;
}

/** Drops a response body without reading it (and without an unhandled 'error'). */
function discard(body: NodeJS.ReadableStream & { destroy(): unknown }): void {
  body.on('error', () => undefined);
  body.destroy();
}

function mapError(err: unknown, timedOut: boolean, policy: HttpPolicy): HttpRequestError {
  if (err instanceof HttpRequestError) return err;
  if (err instanceof OutboundError)
    return new HttpRequestError(timedOut ? 'timeout' : err.code, timedOut ? `no complete answer within ${policy.timeoutMs} ms` : err.message, { cause: err });
  if (timedOut) return new HttpRequestError('timeout', `no complete answer within ${policy.timeoutMs} ms`, { cause: err });
  const code = (err as { code?: unknown })?.code;
  const message = (err as Error)?.message ?? String(err);
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT') {
    return new HttpRequestError('timeout', `no complete answer within ${policy.timeoutMs} ms`, { cause: err });
  }
  if (code === 'UND_ERR_INVALID_ARG') return new HttpRequestError('invalid_url', message, { cause: err });
  return new HttpRequestError('network', typeof code === 'string' ? `${code}: ${message}` : message, { cause: err });
}

function checkTarget(url: URL, policy: OutboundPolicy): void {
  // The connector checks again on the resolved address; this only answers early for literals.
  try {
    checkLiteral(url.hostname, portOf(url), policy);
  } catch (err) {
    throw mapError(err, false, { timeoutMs: 0 } as HttpPolicy);
  }
}

/** Rate limits are per origin and account (the Authorization header), not per origin alone. */
function rateKey(url: URL, headers: Record<string, string>): string {
  return accountKey(url.origin, headers.authorization);
}

function rateLimited(key: string, left: number): HttpRequestError {
  return new HttpRequestError('rate_limited', `${key.replace(/#.*$/, '')} asked to slow down; it may be called again in ${Math.ceil(left / 1000)} s`, {
    retryAfterMs: left,
  });
}

/** How long a "slow down" answer asks to wait, or undefined when it is no such answer. */
export function retryAfterOf(status: number, headers: Record<string, string>): number | undefined {
  if (status !== 429 && status !== 503) return undefined;
  const named = parseRetryAfter(headers['retry-after']);
  if (named !== undefined) return named;
  return status === 429 ? DEFAULT_RATE_LIMIT_DELAY_MS : undefined;
}

export async function safeRequest(req: HttpRequest, policy: HttpPolicy, options: SafeRequestOptions = {}): Promise<HttpResponse> {
  let method = String(req.method).toUpperCase();
  if (!METHODS.has(method)) throw new HttpRequestError('invalid_url', `unsupported method ${JSON.stringify(req.method)}`);
  let url = parseTarget(req.url);
  let headers = cleanHeaders(req.headers);
  let body: string | undefined = method === 'HEAD' ? undefined : req.body;
  const maxRedirects = policy.maxRedirects ?? DEFAULT_MAX_REDIRECTS;
  const outbound: OutboundPolicy = {
    allowPrivate: policy.allowPrivate,
    allowedHosts: policy.allowedHosts,
    perHostConcurrency: policy.perHostConcurrency ?? DEFAULT_PER_HOST_CONCURRENCY,
  };
  checkTarget(url, outbound);

  // A destination that asked us to slow down is waited for before the deadline starts.
  const left = await waitUntilUnblocked(rateKey(url, headers), MAX_IN_THREAD_WAIT_MS);
  if (left > 0) throw rateLimited(rateKey(url, headers), left);

  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new HttpRequestError('timeout', `no complete answer within ${policy.timeoutMs} ms`));
  }, policy.timeoutMs);
  // A custom resolver gets an Agent of its own; everything else shares this thread's pools.
  const own = options.lookup ? new (await loadUndici()).Agent({ connect: guardedConnector(outbound, policy.timeoutMs, options.lookup) }) : undefined;
  const agent = own ?? (await agentFor(outbound, policy.timeoutMs));

  try {
    for (let redirects = 0; ; redirects++) {
      const release = await acquireSlot(destinationKey(url.hostname, portOf(url)), outbound.perHostConcurrency, controller.signal);
      try {
        const res = await agent.request({
          origin: url.origin,
          path: `${url.pathname}${url.search}`,
          method: method as 'GET',
          headers,
          body,
          signal: controller.signal,
          headersTimeout: policy.timeoutMs,
          bodyTimeout: policy.timeoutMs,
          highWaterMark: Math.min(64 * 1024, policy.maxResponseBytes + 1),
        });
        const location = res.headers.location;
        if ([301, 302, 303, 307, 308].includes(res.statusCode) && typeof location === 'string' && location !== '') {
          discard(res.body);
          if (redirects >= maxRedirects) throw new HttpRequestError('too_many_redirects', `more than ${maxRedirects} redirects`);
          let next: URL;
          try {
            next = parseTarget(new URL(location, url).href);
          } catch (err) {
            if (err instanceof HttpRequestError) throw new HttpRequestError('invalid_url', `redirect refused: ${err.message}`);
            throw new HttpRequestError('invalid_url', `redirect to an invalid location ${JSON.stringify(maskUrlPath(location.slice(0, 200)))}`);
          }
          checkTarget(next, outbound);
          if ((res.statusCode === 303 && method !== 'HEAD') || ((res.statusCode === 301 || res.statusCode === 302) && method === 'POST')) {
            method = 'GET';
            body = undefined;
            headers = { ...headers };
            for (const h of BODY_HEADERS) delete headers[h];
          }
          if (next.origin !== url.origin) {
            headers = { ...headers };
            for (const h of CREDENTIAL_HEADERS) delete headers[h];
          }
          url = next;
          continue;
        }

        const responseHeaders = flattenHeaders(res.headers);
        const declared = Number(responseHeaders['content-length']);
        if (Number.isFinite(declared) && declared > policy.maxResponseBytes) {
          discard(res.body);
          throw new HttpRequestError('too_large', `the response declares ${declared} bytes, more than the ${policy.maxResponseBytes} allowed`);
        }
        const chunks: Buffer[] = [];
        let size = 0;
        for await (const chunk of res.body as AsyncIterable<Buffer>) {
          size += chunk.length;
          if (size > policy.maxResponseBytes) {
            discard(res.body);
            throw new HttpRequestError('too_large', `the response is larger than the ${policy.maxResponseBytes} bytes allowed`);
          }
          chunks.push(chunk);
        }
        const retryAfterMs = retryAfterOf(res.statusCode, responseHeaders);
        if (retryAfterMs !== undefined) blockDestination(rateKey(url, headers), retryAfterMs);
        return {
          status: res.statusCode,
          headers: responseHeaders,
          body: new TextDecoder('utf-8').decode(Buffer.concat(chunks, size)),
          truncated: false,
          url: url.href,
          ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
        };
      } finally {
        release();
      }
    }
  } catch (err) {
    throw mapError(err, timedOut, policy);
  } finally {
    clearTimeout(timer);
    if (own) await own.destroy().catch(() => undefined);
  }
}
