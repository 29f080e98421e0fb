import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP, isIPv4, isIPv6, Socket } from 'node:net';
import { Agent, buildConnector } from 'undici';
import type { Config } from '../core/config.js';

/**
 * The outbound HTTP client of the http_request step (and of anything else that calls a URL
 * a workspace chose), hardened against SSRF.
 *
 * - Only http: and https: URLs without credentials.
 * - The address check runs where the socket is opened: a custom undici connector resolves
 *   the host name once (dns.lookup, all addresses), refuses when ANY address is private,
 *   loopback, link-local or otherwise special, and connects to the address it vetted. There
 *   is no second resolution between check and connect, so DNS rebinding cannot slip past.
 *   TLS keeps SNI and certificate checks on the host name; the Host header stays the URL's.
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
}

export function httpPolicyFrom(config: Pick<Config, 'httpAllowPrivate' | 'httpAllowedHosts' | 'httpTimeoutMs' | 'httpMaxResponseBytes'>): HttpPolicy {
  return {
    allowPrivate: config.httpAllowPrivate,
    allowedHosts: [...config.httpAllowedHosts],
    timeoutMs: config.httpTimeoutMs,
    maxResponseBytes: config.httpMaxResponseBytes,
    maxRedirects: DEFAULT_MAX_REDIRECTS,
  };
}

export type HttpRequestErrorCode = 'blocked_address' | 'invalid_url' | 'timeout' | 'too_large' | 'too_many_redirects' | 'network';

export class HttpRequestError extends Error {
  readonly code: HttpRequestErrorCode;
  constructor(code: HttpRequestErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'HttpRequestError';
    this.code = code;
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
}

export type HostLookup = (hostname: string) => Promise<ReadonlyArray<{ address: string; family?: number }>>;

export interface SafeRequestOptions {
  /** Replaces dns.lookup({all: true}); for tests and special resolvers. */
  lookup?: HostLookup;
}

const DEFAULT_MAX_REDIRECTS = 5;
const USER_AGENT = 'svc-http/1';
const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);
/** Hop-by-hop headers, headers the client computes itself, and ones undici refuses. */
const STRIPPED_HEADERS = new Set([
  'host', 'connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization',
  'te', 'trailer', 'transfer-encoding', 'upgrade', 'content-length', 'expect', 'user-agent', 'http2-settings',
]);
/** Dropped when a redirect turns the request into a GET without body (Fetch, "request-body-header name"). */
const BODY_HEADERS = ['content-type', 'content-encoding', 'content-language', 'content-location'];
/** Dropped when a redirect leaves the origin. */
const CREDENTIAL_HEADERS = ['authorization', 'cookie', 'proxy-authorization'];
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const BAD_VALUE = /[\r\n\0]/;

// ---------------------------------------------------------------------------------------
// Address classification

type Cidr4 = readonly [number, number];

function v4(a: string, prefix: number): Cidr4 {
  return [ipv4ToInt(a.split('.').map(Number)), prefix];
}

/** IPv4 ranges that are not the public internet (IANA special-purpose registry and more). */
const BLOCKED_V4: readonly Cidr4[] = [
  v4('0.0.0.0', 8), // "this network", incl. 0.0.0.0
  v4('10.0.0.0', 8), // private
  v4('100.64.0.0', 10), // carrier-grade NAT
  v4('127.0.0.0', 8), // loopback
  v4('169.254.0.0', 16), // link-local, incl. the 169.254.169.254 metadata service
  v4('172.16.0.0', 12), // private
  v4('192.0.0.0', 24), // IETF protocol assignments (incl. NAT64 discovery)
  v4('192.0.2.0', 24), // documentation
  v4('192.88.99.0', 24), // 6to4 relay anycast
  v4('192.168.0.0', 16), // private
  v4('198.18.0.0', 15), // benchmarking
  v4('198.51.100.0', 24), // documentation
  v4('203.0.113.0', 24), // documentation
  v4('224.0.0.0', 4), // multicast
  v4('240.0.0.0', 4), // reserved, incl. 255.255.255.255
];

function ipv4ToInt(octets: readonly number[]): number {
  return (((octets[0] ?? 0) << 24) | ((octets[1] ?? 0) << 16) | ((octets[2] ?? 0) << 8) | (octets[3] ?? 0)) >>> 0;
}

function isBlockedV4(octets: readonly number[]): boolean {
  const n = ipv4ToInt(octets);
  return BLOCKED_V4.some(([base, prefix]) => (prefix === 0 ? 0 : (n >>> (32 - prefix)) === (base >>> (32 - prefix))));
}

/** The 16 bytes of an IPv6 address (zone id ignored), or null. */
function parseIPv6(input: string): number[] | null {
  const ip = input.replace(/%.*$/, '');
  if (!isIPv6(ip)) return null;
  let text = ip;
  const tail: number[] = [];
  const lastColon = text.lastIndexOf(':');
  if (text.slice(lastColon + 1).includes('.')) {
    const quad = text.slice(lastColon + 1).split('.').map(Number);
    tail.push(((quad[0] ?? 0) << 8) | (quad[1] ?? 0), ((quad[2] ?? 0) << 8) | (quad[3] ?? 0));
    text = `${text.slice(0, lastColon + 1)}0:0`;
  }
  const parseGroups = (s: string): number[] => (s === '' ? [] : s.split(':').map((g) => parseInt(g, 16)));
  let groups: number[];
  const gap = text.indexOf('::');
  if (gap >= 0) {
    const head = parseGroups(text.slice(0, gap));
    const rest = parseGroups(text.slice(gap + 2));
    groups = [...head, ...new Array<number>(8 - head.length - rest.length).fill(0), ...rest];
  } else {
    groups = parseGroups(text);
  }
  if (tail.length) groups.splice(groups.length - 2, 2, ...tail);
  if (groups.length !== 8 || groups.some((g) => !Number.isInteger(g) || g < 0 || g > 0xffff)) return null;
  return groups.flatMap((g) => [g >> 8, g & 0xff]);
}

function isBlockedV6(b: readonly number[]): boolean {
  const zero = (from: number, to: number): boolean => b.slice(from, to).every((x) => x === 0);
  const at = (i: number): number => b[i] ?? 0;
  // ::ffff:a.b.c.d (mapped), ::a.b.c.d (compatible, incl. :: and ::1), ::ffff:0:a.b.c.d (SIIT)
  if (zero(0, 10) && at(10) === 0xff && at(11) === 0xff) return isBlockedV4(b.slice(12));
  if (zero(0, 12)) return isBlockedV4(b.slice(12));
  if (zero(0, 8) && at(8) === 0xff && at(9) === 0xff && zero(10, 12)) return isBlockedV4(b.slice(12));
  // NAT64 well-known prefix 64:ff9b::/96 reaches the embedded IPv4 address
  if (at(0) === 0x00 && at(1) === 0x64 && at(2) === 0xff && at(3) === 0x9b && zero(4, 12)) return isBlockedV4(b.slice(12));
  // 6to4 2002::/16 embeds an IPv4 address in bits 16..47
  if (at(0) === 0x20 && at(1) === 0x02) return isBlockedV4(b.slice(2, 6));
  // Everything outside global unicast 2000::/3: ULA fc00::/7, link-local fe80::/10,
  // site-local fec0::/10, multicast ff00::/8, discard 100::/64, local NAT64 64:ff9b:1::/48 ...
  if ((at(0) & 0xe0) !== 0x20) return true;
  if (at(0) === 0x20 && at(1) === 0x01) {
    if (at(2) === 0x00 && at(3) === 0x00) return true; // Teredo 2001::/32
    if (at(2) === 0x0d && at(3) === 0xb8) return true; // documentation 2001:db8::/32
    if (at(2) === 0x00 && (at(3) & 0xf0) === 0x10) return true; // ORCHID 2001:10::/28
    if (at(2) === 0x00 && (at(3) & 0xf0) === 0x20) return true; // ORCHIDv2 2001:20::/28
  }
  if (at(0) === 0x3f && at(1) === 0xff && (at(2) & 0xf0) === 0x00) return true; // documentation 3fff::/20
  return false;
}

/**
 * True when an outbound request must not reach this address: loopback, unspecified,
 * private, link-local, CGNAT, multicast, reserved and documentation ranges, and IPv6 forms
 * that embed such an IPv4 address (mapped, compatible, NAT64, 6to4). Input must be a
 * canonical IPv4 dotted quad or an IPv6 address; anything else is refused (fails closed).
 */
export function isBlockedAddress(ip: string): boolean {
  if (isIPv4(ip)) return isBlockedV4(ip.split('.').map(Number));
  const bytes = parseIPv6(ip);
  return bytes ? isBlockedV6(bytes) : true;
}

// ---------------------------------------------------------------------------------------
// URL and header checks

function parseTarget(raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new HttpRequestError('invalid_url', `not an absolute URL: ${JSON.stringify(raw.slice(0, 200))}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new HttpRequestError('invalid_url', `only http: and https: URLs are allowed, not ${url.protocol}`);
  if (url.username !== '' || url.password !== '') throw new HttpRequestError('invalid_url', 'URLs with credentials (user:pass@) are not allowed; send an Authorization header instead');
  if (url.hostname === '') throw new HttpRequestError('invalid_url', 'the URL has no host');
  return url;
}

/** Bare host (IPv6 without brackets, no trailing dot). */
function bareHost(hostname: string): string {
  const h = hostname.startsWith('[') && hostname.endsWith(']') ? hostname.slice(1, -1) : hostname;
  return h.toLowerCase().replace(/\.$/, '');
}

function hostKey(hostname: string, protocol: string, port: string): string {
  const host = bareHost(hostname);
  const effectivePort = port || (protocol === 'https:' ? '443' : '80');
  return `${isIPv6(host) ? `[${host}]` : host}:${effectivePort}`;
}

function normaliseAllowed(entry: string): string {
  const e = entry.trim().toLowerCase();
  const m = /^(\[[^\]]+\]|[^:]+):(\d+)$/.exec(e);
  if (!m) return e;
  return `${m[1]!.startsWith('[') ? m[1] : m[1]!.replace(/\.$/, '')}:${Number(m[2])}`;
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
// The guarded connector

const systemLookup: HostLookup = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });

function guardedConnector(policy: HttpPolicy, allowed: ReadonlySet<string>, lookup: HostLookup, signal: AbortSignal): buildConnector.connector {
  const base = buildConnector({ timeout: policy.timeoutMs });
  return (opts, callback) => {
    const host = bareHost(opts.hostname);
    const exempt = policy.allowPrivate || allowed.has(hostKey(opts.hostname, opts.protocol, opts.port));
    let done = false;
    let pending: Socket | undefined;
    const finish = (err: Error | null, socket: Socket | null): void => {
      if (done) {
        socket?.destroy();
        return;
      }
      done = true;
      signal.removeEventListener('abort', onAbort);
      if (err) callback(err, null);
      else callback(null, socket!);
    };
    // The deadline also ends a lookup or a connect in progress, so nothing lingers.
    const onAbort = (): void => {
      pending?.destroy();
      finish(signal.reason instanceof Error ? signal.reason : new HttpRequestError('timeout', 'aborted'), null);
    };
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });

    const attempt = (addresses: readonly string[], i: number, servername: string | undefined): void => {
      if (done) return;
      const socket: unknown = base({ ...opts, hostname: addresses[i]!, servername }, (err, connected) => {
        pending = undefined;
        if (err && i + 1 < addresses.length && !done) attempt(addresses, i + 1, servername);
        else finish(err, connected);
      });
      if (socket instanceof Socket) pending = socket;
    };

    (isIP(host) ? Promise.resolve([{ address: host }]) : lookup(host)).then(
      (found) => {
        if (done) return;
        const addresses = found.map((a) => a.address);
        if (addresses.length === 0) return finish(new HttpRequestError('network', `${host} did not resolve to any address`), null);
        if (!exempt) {
          const bad = addresses.find((a) => isBlockedAddress(a));
          if (bad !== undefined) {
            const why = bad === host ? `${host} is a private, loopback or reserved address` : `${host} resolves to ${bad}, a private, loopback or reserved address`;
            return finish(new HttpRequestError('blocked_address', why), null);
          }
        }
        // Connect to the vetted addresses only, in order; TLS still names the host (SNI and
        // certificate check), and undici keeps the URL's Host header.
        attempt(addresses, 0, opts.servername || (isIP(host) ? undefined : host));
      },
      (err: unknown) => finish(new HttpRequestError('network', `cannot resolve ${host}: ${(err as Error)?.message ?? String(err)}`, { cause: err }), null),
    );
  };
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
  if (timedOut) return new HttpRequestError('timeout', `no complete answer within ${policy.timeoutMs} ms`, { cause: err });
  const code = (err as { code?: unknown })?.code;
  const message = (err as Error)?.message ?? String(err);
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT') {
    return new HttpRequestError('timeout', `no complete answer within ${policy.timeoutMs} ms`, { cause: err });
  }
  if (code === 'UND_ERR_INVALID_ARG') return new HttpRequestError('invalid_url', message, { cause: err });
  return new HttpRequestError('network', typeof code === 'string' ? `${code}: ${message}` : message, { cause: err });
}

function checkLiteral(url: URL, policy: HttpPolicy, allowed: ReadonlySet<string>): void {
  // The connector checks again; this only answers early for literal addresses.
  const host = bareHost(url.hostname);
  if (!isIP(host) || policy.allowPrivate || allowed.has(hostKey(url.hostname, url.protocol, url.port))) return;
  if (isBlockedAddress(host)) throw new HttpRequestError('blocked_address', `${host} is a private, loopback or reserved address`);
}

export async function safeRequest(req: HttpRequest, policy: HttpPolicy, options: SafeRequestOptions = {}): Promise<HttpResponse> {
  let method = String(req.method).toUpperCase();
  if (!METHODS.has(method)) throw new HttpRequestError('invalid_url', `unsupported method ${JSON.stringify(req.method)}`);
  let url = parseTarget(req.url);
  let headers = cleanHeaders(req.headers);
  let body: string | undefined = method === 'HEAD' ? undefined : req.body;
  const maxRedirects = policy.maxRedirects ?? DEFAULT_MAX_REDIRECTS;
  const allowed = new Set(policy.allowedHosts.map(normaliseAllowed));
  checkLiteral(url, policy, allowed);

  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new HttpRequestError('timeout', `no complete answer within ${policy.timeoutMs} ms`));
  }, policy.timeoutMs);
  const agent = new Agent({
    connect: guardedConnector(policy, allowed, options.lookup ?? systemLookup, controller.signal),
    headersTimeout: policy.timeoutMs,
    bodyTimeout: policy.timeoutMs,
  });

  try {
    for (let redirects = 0; ; redirects++) {
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
          throw new HttpRequestError('invalid_url', `redirect to an invalid location ${JSON.stringify(location.slice(0, 200))}`);
        }
        checkLiteral(next, policy, allowed);
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
      return {
        status: res.statusCode,
        headers: responseHeaders,
        body: new TextDecoder('utf-8').decode(Buffer.concat(chunks, size)),
        truncated: false,
        url: url.href,
      };
    }
  } catch (err) {
    throw mapError(err, timedOut, policy);
  } finally {
    clearTimeout(timer);
    await agent.destroy().catch(() => undefined);
  }
}
