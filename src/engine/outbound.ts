import { createHash } from 'node:crypto';
import { lookup as dnsLookup } from 'node:dns/promises';
import { connect as netConnect, isIP, isIPv4, isIPv6, Socket } from 'node:net';
import type { Agent, buildConnector } from 'undici';
import type { Config } from '../core/config.js';

/**
 * The one guarded connector for every outbound connection a workspace can aim: the
 * http_request step, the Twilio and WhatsApp base URLs and the SMTP host.
 *
 * - The policy is checked on the resolved address at connect time: we resolve the name
 *   once, refuse when any address is private, loopback, link-local or otherwise special
 *   (unless the policy allows it), and connect to exactly the addresses we checked. There
 *   is no second resolution in between, so DNS rebinding cannot slip past. TLS still names
 *   the host (SNI and certificate check).
 * - Connections are reused: one keep-alive undici Agent per policy and connect timeout,
 *   shared by every send of this thread (its pools are per origin).
 * - Sends to one destination are bounded by a per-destination cap (FIFO beyond it), and a
 *   destination that answered "slow down" is blocked until the time it named, so the other
 *   sends of this thread wait instead of hammering it.
 *
 * Everything here is per thread (each worker thread has its own pools and limits).
 */

export interface OutboundPolicy {
  /** Let every address through (a development setting). */
  readonly allowPrivate: boolean;
  /** Lower-case "host:port" pairs allowed even when they resolve to refused addresses. */
  readonly allowedHosts: readonly string[];
  /** Connections (requests, SMTP sends) in flight to one destination from this thread. */
  readonly perHostConcurrency: number;
}

export const DEFAULT_PER_HOST_CONCURRENCY = 256;
/** Used when a rate-limit answer names no time. */
export const DEFAULT_RATE_LIMIT_DELAY_MS = 2_000;
/** A Retry-After further away than this is cut to it. */
export const MAX_RATE_LIMIT_DELAY_MS = 3_600_000;
/** A send waits in this thread for a blocked destination at most this long; beyond, it is deferred. */
export const MAX_IN_THREAD_WAIT_MS = 10_000;

/** The policy of the default configuration: nothing private, nothing allow-listed. */
export const STRICT_OUTBOUND_POLICY: OutboundPolicy = Object.freeze({
  allowPrivate: false,
  allowedHosts: Object.freeze([]),
  perHostConcurrency: DEFAULT_PER_HOST_CONCURRENCY,
});

export function outboundPolicyFrom(
  config: Pick<Config, 'httpAllowPrivate' | 'httpAllowedHosts'> & Partial<Pick<Config, 'outboundPerHostConcurrency'>>,
): OutboundPolicy {
  return {
    allowPrivate: config.httpAllowPrivate,
    allowedHosts: [...config.httpAllowedHosts],
    perHostConcurrency: config.outboundPerHostConcurrency ?? DEFAULT_PER_HOST_CONCURRENCY,
  };
}

let threadDefault: OutboundPolicy = STRICT_OUTBOUND_POLICY;

/**
 * The policy of sends whose caller passes none: the strict one until the process's
 * configuration is set here once at start (in the server and in each worker thread).
 */
export function configureOutbound(policy: OutboundPolicy): void {
  threadDefault = Object.freeze({ ...policy, allowedHosts: Object.freeze([...policy.allowedHosts]) });
}

export function defaultOutboundPolicy(): OutboundPolicy {
  return threadDefault;
}

export type OutboundErrorCode = 'blocked_address' | 'network' | 'timeout';

/** A connection the guard refused or could not open. `blocked_address` is permanent. */
export class OutboundError extends Error {
  readonly code: OutboundErrorCode;
  constructor(code: OutboundErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'OutboundError';
    this.code = code;
  }
}

export type HostLookup = (hostname: string) => Promise<ReadonlyArray<{ address: string; family?: number }>>;

const systemLookup: HostLookup = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });

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
  return BLOCKED_V4.some(([base, prefix]) => (prefix === 0 ? 0 : n >>> (32 - prefix) === base >>> (32 - prefix)));
}

/** The 16 bytes of an IPv6 address (zone id ignored), or null. */
function parseIPv6(input: string): number[] | null {
  const ip = input.replace(/%.*$/, '');
  if (!isIPv6(ip)) return null;
  let text = ip;
  const tail: number[] = [];
  const lastColon = text.lastIndexOf(':');
  if (text.slice(lastColon + 1).includes('.')) {
    const quad = text
      .slice(lastColon + 1)
      .split('.')
      .map(Number);
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
// Destinations and the allow-list

/** Bare host (IPv6 without brackets, lower case, no trailing dot). */
export function bareHost(hostname: string): string {
  const h = hostname.startsWith('[') && hostname.endsWith(']') ? hostname.slice(1, -1) : hostname;
  return h.toLowerCase().replace(/\.$/, '');
}

/** "host:port" as the allow-list writes it (IPv6 in brackets). */
export function destinationKey(hostname: string, port: number | string): string {
  const host = bareHost(hostname);
  return `${isIPv6(host) ? `[${host}]` : host}:${Number(port)}`;
}

function normaliseAllowed(entry: string): string {
  const e = entry.trim().toLowerCase();
  const m = /^(\[[^\]]+\]|[^:]+):(\d+)$/.exec(e);
  if (!m) return e;
  return `${m[1]!.startsWith('[') ? m[1] : m[1]!.replace(/\.$/, '')}:${Number(m[2])}`;
}

const allowedSets = new WeakMap<readonly string[], ReadonlySet<string>>();

/** Whether the policy lets this destination reach any address, private ones included. */
export function isExempt(policy: OutboundPolicy, hostname: string, port: number | string): boolean {
  if (policy.allowPrivate) return true;
  let allowed = allowedSets.get(policy.allowedHosts);
  if (!allowed) {
    allowed = new Set(policy.allowedHosts.map(normaliseAllowed));
    allowedSets.set(policy.allowedHosts, allowed);
  }
  return allowed.has(destinationKey(hostname, port));
}

/** The port an http(s) URL connects to: its own, or its scheme's. */
export function portOf(url: URL): number {
  return Number(url.port || (url.protocol === 'https:' ? 443 : 80));
}

/** Refuses a literal address early (before any queueing); names are checked when resolved. */
export function checkLiteral(hostname: string, port: number | string, policy: OutboundPolicy): void {
  const host = bareHost(hostname);
  if (!isIP(host) || isExempt(policy, hostname, port)) return;
  if (isBlockedAddress(host)) throw new OutboundError('blocked_address', `${host} is a private, loopback or reserved address`);
}

/**
 * Why a destination saved now would be refused at every send: its host is a literal
 * private, loopback or reserved address the policy does not allow; undefined when not.
 * What a save-time check says at the field (channels, http_request steps).
 */
export function literalRefusal(hostname: string, port: number | string, policy: OutboundPolicy): string | undefined {
  try {
    checkLiteral(hostname, port, policy);
    return undefined;
  } catch (err) {
    if (!(err instanceof OutboundError)) throw err;
    return `${err.message}: svc sends nowhere private unless allowed (SVC_HTTP_ALLOWED_HOSTS, SVC_HTTP_ALLOW_PRIVATE)`;
  }
}

/**
 * Resolves a destination once and returns the addresses a socket may be opened to, or
 * throws: `blocked_address` when any address is refused by the policy.
 */
export async function resolveChecked(hostname: string, port: number | string, policy: OutboundPolicy, lookup: HostLookup = systemLookup): Promise<string[]> {
  const host = bareHost(hostname);
  let found: ReadonlyArray<{ address: string }>;
  try {
    found = isIP(host) ? [{ address: host }] : await lookup(host);
  } catch (err) {
    throw new OutboundError('network', `cannot resolve ${host}: ${(err as NodeJS.ErrnoException)?.code ?? (err as Error)?.message ?? String(err)}`, {
      cause: err,
    });
  }
  const addresses = found.map((a) => a.address);
  if (addresses.length === 0) throw new OutboundError('network', `${host} did not resolve to any address`);
  if (!isExempt(policy, hostname, port)) {
    const bad = addresses.find((a) => isBlockedAddress(a));
    if (bad !== undefined) {
      throw new OutboundError(
        'blocked_address',
        bad === host ? `${host} is a private, loopback or reserved address` : `${host} resolves to ${bad}, a private, loopback or reserved address`,
      );
    }
  }
  return addresses;
}

// ---------------------------------------------------------------------------------------
// Sockets: undici connector and plain TCP (SMTP)

type Undici = typeof import('undici');
let undici: Undici | undefined;

/**
 * undici, loaded on a thread's first call out (an http_request step, a provider's API, Stripe):
 * most threads make none (webhook intake, the outbox), and it is the largest module they would
 * otherwise evaluate at start, about 5 MB of heap in each of them.
 */
export async function loadUndici(): Promise<Undici> {
  undici ??= await import('undici');
  return undici;
}

function loadedUndici(): Undici {
  if (!undici) throw new Error('undici is used before loadUndici() resolved');
  return undici;
}

/**
 * An undici connector that resolves and checks the host, then connects to the checked
 * addresses in order. One timer bounds resolution and connect.
 */
export function guardedConnector(policy: OutboundPolicy, timeoutMs: number, lookup: HostLookup = systemLookup): buildConnector.connector {
  const base = loadedUndici().buildConnector({ timeout: timeoutMs });
  return (opts, callback) => {
    const host = bareHost(opts.hostname);
    const port = opts.port || (opts.protocol === 'https:' ? '443' : '80');
    let done = false;
    let pending: Socket | undefined;
    const finish = (err: Error | null, socket: Socket | null): void => {
      if (done) {
        socket?.destroy();
        return;
      }
      done = true;
      clearTimeout(timer);
      if (err) callback(err, null);
      else callback(null, socket!);
    };
    const timer = setTimeout(() => {
      pending?.destroy();
      finish(new OutboundError('timeout', `no connection to ${host} within ${timeoutMs} ms`), null);
    }, timeoutMs);
    timer.unref();

    const attempt = (addresses: readonly string[], i: number, servername: string | undefined): void => {
      if (done) return;
      const socket: unknown = base({ ...opts, hostname: addresses[i]!, servername }, (err, connected) => {
        pending = undefined;
        if (err && i + 1 < addresses.length && !done) attempt(addresses, i + 1, servername);
        else finish(err, connected);
      });
      if (socket instanceof Socket) pending = socket;
    };

    resolveChecked(opts.hostname, port, policy, lookup).then(
      // TLS still names the host (SNI and certificate check); undici keeps the Host header.
      (addresses) => attempt(addresses, 0, opts.servername || (isIP(host) ? undefined : host)),
      (err: Error) => finish(err, null),
    );
  };
}

/** A plain TCP socket to a checked address of the destination (SMTP's socket hook). */
export async function connectChecked(
  hostname: string,
  port: number,
  policy: OutboundPolicy,
  timeoutMs: number,
  lookup: HostLookup = systemLookup,
): Promise<Socket> {
  const deadline = Date.now() + timeoutMs;
  let timer: NodeJS.Timeout | undefined;
  const addresses = await Promise.race([
    resolveChecked(hostname, port, policy, lookup),
    new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => reject(new OutboundError('timeout', `cannot resolve ${bareHost(hostname)} within ${timeoutMs} ms`)), timeoutMs);
    }),
  ]).finally(() => clearTimeout(timer));
  let last: unknown;
  for (const address of addresses) {
    const left = deadline - Date.now();
    if (left <= 0) break;
    try {
      return await new Promise<Socket>((resolve, reject) => {
        const socket = netConnect({ host: address, port });
        const timer = setTimeout(() => {
          socket.destroy();
          reject(new OutboundError('timeout', `no connection to ${bareHost(hostname)} within ${timeoutMs} ms`));
        }, left);
        socket.once('connect', () => {
          clearTimeout(timer);
          socket.removeAllListeners('error');
          resolve(socket);
        });
        socket.once('error', (err) => {
          clearTimeout(timer);
          reject(err);
        });
      });
    } catch (err) {
      last = err;
    }
  }
  if (last instanceof OutboundError) throw last;
  const code = (last as NodeJS.ErrnoException | undefined)?.code;
  throw new OutboundError(last === undefined ? 'timeout' : 'network', `cannot connect to ${destinationKey(hostname, port)}${code ? ` (${code})` : ''}`, {
    cause: last,
  });
}

// ---------------------------------------------------------------------------------------
// Shared keep-alive agents

const MAX_AGENTS = 16;
const agents = new Map<string, Agent>();

/**
 * The keep-alive Agent of a policy: one per (policy, connect timeout) in this thread,
 * reused by every request (pools are per origin inside it). A pooled connection stays
 * bound to the address that was checked when it opened.
 */
export async function agentFor(policy: OutboundPolicy, connectTimeoutMs: number): Promise<Agent> {
  const { Agent } = await loadUndici();
  const key = JSON.stringify([policy.allowPrivate, [...policy.allowedHosts].sort(), connectTimeoutMs]);
  let agent = agents.get(key);
  if (agent) {
    agents.delete(key);
    agents.set(key, agent);
    return agent;
  }
  if (agents.size >= MAX_AGENTS) {
    const [oldestKey, oldest] = agents.entries().next().value as [string, Agent];
    agents.delete(oldestKey);
    void oldest.close().catch(() => undefined);
  }
  agent = new Agent({ connect: guardedConnector(policy, connectTimeoutMs), keepAliveTimeout: 10_000, keepAliveMaxTimeout: 60_000 });
  agents.set(key, agent);
  return agent;
}

// ---------------------------------------------------------------------------------------
// Per-destination cap and rate-limit blocks

interface Gate {
  active: number;
  waiting: Array<() => void>;
}

const gates = new Map<string, Gate>();

/**
 * Takes one of `cap` slots of a destination, waiting in FIFO order when all are taken.
 * Returns the release function (call it once).
 */
export async function acquireSlot(destination: string, cap: number, signal?: AbortSignal): Promise<() => void> {
  let gate = gates.get(destination);
  if (!gate) {
    gate = { active: 0, waiting: [] };
    gates.set(destination, gate);
  }
  const g = gate;
  if (g.active >= Math.max(1, cap)) {
    await new Promise<void>((resolve, reject) => {
      const wake = (): void => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      const onAbort = (): void => {
        const i = g.waiting.indexOf(wake);
        if (i >= 0) g.waiting.splice(i, 1);
        reject(signal!.reason instanceof Error ? signal!.reason : new OutboundError('timeout', 'aborted while waiting for a connection slot'));
      };
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      g.waiting.push(wake);
    });
  } else {
    g.active++;
  }
  let released = false;
  return () => {
    if (released) return;
    released = true;
    const next = g.waiting.shift();
    // The slot passes straight to the next in line, so a newcomer cannot overtake the queue;
    // on the next turn of the loop, once the pool has taken the freed connection back, so
    // that the next request reuses it instead of opening another.
    if (next) setImmediate(next);
    else {
      g.active--;
      if (g.active === 0) gates.delete(destination);
    }
  };
}

/** Slots in use at a destination (for tests and metrics). */
export function slotsInUse(destination: string): number {
  return gates.get(destination)?.active ?? 0;
}

const blockedUntil = new Map<string, number>();
const MAX_BLOCKS = 10_000;

/** Marks a destination (and account) as rate limited for `ms` from now. */
export function blockDestination(key: string, ms: number): void {
  const until = Date.now() + Math.min(Math.max(0, ms), MAX_RATE_LIMIT_DELAY_MS);
  if ((blockedUntil.get(key) ?? 0) >= until) return;
  if (blockedUntil.size >= MAX_BLOCKS) {
    const now = Date.now();
    for (const [k, t] of blockedUntil) if (t <= now) blockedUntil.delete(k);
    if (blockedUntil.size >= MAX_BLOCKS) blockedUntil.delete(blockedUntil.keys().next().value as string);
  }
  blockedUntil.set(key, until);
}

/** Milliseconds until a blocked destination may be called again; 0 when it is not blocked. */
export function blockedForMs(key: string): number {
  const until = blockedUntil.get(key);
  if (until === undefined) return 0;
  const left = until - Date.now();
  if (left <= 0) {
    blockedUntil.delete(key);
    return 0;
  }
  return left;
}

/**
 * Waits while the destination is blocked, up to `maxWaitMs`. Returns 0 once it may be
 * called, or the time still left when the block lasts longer than the wait allowed (the
 * caller then defers the send instead of holding it here).
 */
export async function waitUntilUnblocked(key: string, maxWaitMs: number, signal?: AbortSignal): Promise<number> {
  const started = Date.now();
  for (;;) {
    const left = blockedForMs(key);
    if (left === 0) return 0;
    if (Date.now() - started + left > maxWaitMs) return left;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, left);
      const onAbort = (): void => {
        clearTimeout(timer);
        reject(signal!.reason instanceof Error ? signal!.reason : new OutboundError('timeout', 'aborted'));
      };
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
}

/** A Retry-After value (delay in seconds or an HTTP date) in milliseconds, or undefined. */
export function parseRetryAfter(value: string | undefined | null, now = Date.now()): number | undefined {
  if (value === undefined || value === null) return undefined;
  const text = value.trim();
  if (text === '') return undefined;
  if (/^\d+$/.test(text)) return Math.min(Number(text) * 1000, MAX_RATE_LIMIT_DELAY_MS);
  const at = Date.parse(text);
  if (Number.isNaN(at)) return undefined;
  return Math.min(Math.max(0, at - now), MAX_RATE_LIMIT_DELAY_MS);
}

/** A short stable key for an account at a destination: rate limits are per account. */
export function accountKey(destination: string, secret: string | undefined): string {
  if (!secret) return destination;
  return `${destination}#${createHash('sha256').update(secret).digest('base64url').slice(0, 16)}`;
}

/** Closes every pooled connection and forgets blocks and queues (shutdown, tests). */
export async function closeOutbound(): Promise<void> {
  const all = [...agents.values()];
  agents.clear();
  blockedUntil.clear();
  await Promise.all(all.map((a) => a.close().catch(() => undefined)));
}
