import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';
import type { Transporter } from 'nodemailer';
import type { SmtpCredentials, SmtpSettings } from '../../core/services/channels.js';
import { normalizeEmail } from '../../core/validation.js';
import {
  accountKey,
  blockDestination,
  checkLiteral,
  connectChecked,
  defaultOutboundPolicy,
  DEFAULT_RATE_LIMIT_DELAY_MS,
  destinationKey,
  MAX_IN_THREAD_WAIT_MS,
  OutboundError,
  waitUntilUnblocked,
  type OutboundPolicy,
} from '../outbound.js';
import { errorText, rateLimited, refusedDestination, takeTurn, type Provider, type SendFailure } from './api.js';

/** Connections of one account's pool, and so its sends at once. */
const MAX_CONNECTIONS = 3;

/**
 * EMAIL over SMTP with nodemailer. One pooled transport per distinct server, account,
 * timeout and outbound policy (keyed by a hash, so a stale password is never reused),
 * closed when idle for IDLE_EVICT_MS or when evicted (at most MAX_TRANSPORTS).
 *
 * Every connection opens through the guarded connector (nodemailer's getSocket hook): the
 * host is resolved by us, checked against the outbound policy and the socket opens to the
 * checked address; TLS (implicit or STARTTLS) still names the host (SNI and certificate).
 */
interface PooledTransport {
  transport: Transporter;
  lastUsed: number;
  inFlight: number;
}

const transports = new Map<string, PooledTransport>();
const MAX_TRANSPORTS = 100;
const IDLE_EVICT_MS = 5 * 60_000;

function evictIdle(now: number): void {
  for (const [key, entry] of transports) {
    if (entry.inFlight === 0 && now - entry.lastUsed > IDLE_EVICT_MS) {
      transports.delete(key);
      entry.transport.close();
    }
  }
}

/** nodemailer, loaded on a thread's first SMTP send (most threads make none: about 2 MB of heap each). */
let nodemailer: Promise<typeof import('nodemailer')> | undefined;

function transportFor(
  createTransport: typeof import('nodemailer')['createTransport'],
  settings: SmtpSettings,
  credentials: SmtpCredentials,
  timeoutMs: number,
  policy: OutboundPolicy,
): PooledTransport {
  const key = createHash('sha256')
    .update(JSON.stringify([settings, credentials, timeoutMs, policy.allowPrivate, [...policy.allowedHosts].sort()]))
    .digest('base64url');
  const now = Date.now();
  evictIdle(now);
  let entry = transports.get(key);
  if (entry) {
    // Most recently used last, so eviction takes the least recently used.
    transports.delete(key);
    transports.set(key, entry);
    entry.lastUsed = now;
    return entry;
  }
  if (transports.size >= MAX_TRANSPORTS) {
    const [oldestKey, oldest] = transports.entries().next().value as [string, PooledTransport];
    transports.delete(oldestKey);
    oldest.transport.close();
  }
  const transport = createTransport({
    pool: true,
    host: settings.host,
    port: settings.port,
    secure: settings.secure,
    requireTLS: settings.requireTLS,
    ...(credentials.user !== undefined ? { auth: { user: credentials.user, pass: credentials.pass ?? '' } } : {}),
    connectionTimeout: timeoutMs,
    greetingTimeout: timeoutMs,
    socketTimeout: timeoutMs,
    dnsTimeout: timeoutMs,
    idleTimeout: 60_000,
    maxConnections: MAX_CONNECTIONS,
    logger: false,
    // The guarded connector: nodemailer never resolves or connects by itself.
    getSocket(_options: unknown, callback: (err: Error | null, socketOptions?: { connection?: Socket } | false) => void) {
      connectChecked(settings.host, settings.port, policy, timeoutMs).then(
        (socket) => callback(null, { connection: socket }),
        (err: Error) => callback(err),
      );
    },
  });
  entry = { transport, lastUsed: now, inFlight: 0 };
  transports.set(key, entry);
  return entry;
}

/** Closes every pooled SMTP connection (server shutdown, tests). */
export function closeSmtpTransports(): void {
  for (const t of transports.values()) t.transport.close();
  transports.clear();
}

/** Failures that are about this message or this account, not the moment: do not retry. */
const PERMANENT_CODES = new Set(['EENVELOPE', 'EMESSAGE', 'EAUTH', 'ENOAUTH', 'EOAUTH2', 'ETLS', 'EREQUIRETLS', 'ECONFIG', 'EMAXRECIPIENTS']);
/** SMTP's "slow down" replies: service not available (421) and local error / greylisting (451). */
const RATE_LIMIT_REPLIES = new Set([421, 451]);

/** OpenSSL's verification failures (self-signed, expired, wrong name ...): the settings must change. */
const CERTIFICATE_CODES =
  /^(DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT(_LOCALLY)?|CERT_[A-Z_]+|ERR_TLS_CERT_ALTNAME_INVALID|HOSTNAME_MISMATCH)$/;

/** Fixed texts for failures without a reply: nodemailer's messages may quote a banner. */
const CODE_TEXT: Record<string, string> = {
  ETIMEDOUT: 'timed out',
  EAUTH: 'authentication failed',
  ENOAUTH: 'authentication failed',
  EOAUTH2: 'authentication failed',
  ECONNECTION: 'the connection failed',
  ESOCKET: 'the connection failed',
  EDNS: 'the host name could not be resolved',
  ETLS: 'TLS failed',
  EREQUIRETLS: 'the server does not offer TLS',
  EENVELOPE: 'the envelope was refused',
  EMESSAGE: 'the message could not be built',
  EPROTOCOL: 'the server broke the SMTP protocol',
  EMAXRECIPIENTS: 'too many recipients',
  ECONFIG: 'the configuration is invalid',
};

/**
 * SMTP says it itself: a 4xx reply (421, 450, 451, 452 ...) is temporary, a 5xx reply is
 * final; 421 and 451 also ask to slow down (retryAfterMs). Without a reply, connection
 * trouble and timeouts are temporary; refused authentication, TLS, envelope problems and a
 * destination refused by the outbound policy are not. The stored text is the reply code
 * and the first line of the reply, cut short; never a banner or a raw message.
 */
export function classifySmtpError(err: unknown): SendFailure {
  if (err instanceof OutboundError) {
    if (err.code === 'blocked_address') return refusedDestination('smtp', err);
    return {
      ok: false,
      transient: true,
      error: `smtp: ${err.code === 'timeout' ? 'timed out' : 'the server could not be reached'} (${err.code === 'timeout' ? 'ETIMEDOUT' : 'ECONNECTION'})`,
    };
  }
  const e = err as { code?: string; originalCode?: string; responseCode?: number; response?: string; message?: string };
  if (typeof e.originalCode === 'string' && CERTIFICATE_CODES.test(e.originalCode)) {
    return { ok: false, transient: false, error: 'smtp: TLS failed, the certificate was not accepted (ETLS)' };
  }
  if (typeof e.responseCode === 'number' && e.responseCode >= 200 && e.responseCode < 600) {
    const firstLine = (e.response ?? '').split(/\r?\n/)[0] ?? '';
    const text = errorText(firstLine.replace(/^\d{3}[ -]?/, ''), 120);
    const error = `smtp: the server answered ${e.responseCode}${text ? ` ${text}` : ''}`;
    if (RATE_LIMIT_REPLIES.has(e.responseCode)) return { ok: false, transient: true, error, retryAfterMs: DEFAULT_RATE_LIMIT_DELAY_MS };
    return { ok: false, transient: e.responseCode >= 400 && e.responseCode < 500, error };
  }
  const code = typeof e.code === 'string' && /^E[A-Z0-9_]{1,30}$/.test(e.code) ? e.code : 'ERROR';
  const transient = !PERMANENT_CODES.has(code);
  return { ok: false, transient, error: `smtp: ${CODE_TEXT[code] ?? 'the send failed'} (${code})` };
}

export const smtpProvider: Provider = {
  name: 'smtp',
  async send(msg, settings, credentials, opts) {
    const s = settings as unknown as SmtpSettings;
    const c = credentials as SmtpCredentials;
    // nodemailer reads a string as an address list and strips line breaks from it: "a@x.co,
    // b@x.co" or "<a@x.co>\r\nBcc: b@x.co" would reach other people than the one named. Only
    // one plain address goes, as an address object, which nodemailer takes as it is.
    const to = normalizeEmail(msg.to);
    if (!to) return { ok: false, transient: false, error: 'smtp: the recipient is not one email address (EENVELOPE)' };
    const policy = opts.outbound ?? defaultOutboundPolicy();
    try {
      checkLiteral(s.host, s.port, policy);
    } catch (err) {
      return classifySmtpError(err);
    }
    const destination = `smtp://${destinationKey(s.host, s.port)}`;
    const rateKey = accountKey(destination, c.user);
    const left = await waitUntilUnblocked(rateKey, MAX_IN_THREAD_WAIT_MS);
    if (left > 0) return rateLimited('smtp', left, 'an earlier send was told to slow down');

    nodemailer ??= import('nodemailer');
    const { createTransport } = await nodemailer;
    // As many sends of one account at once as its pool has connections: one more would wait
    // in nodemailer's queue, out of sight, as if it were being sent.
    const release = await takeTurn(rateKey, Math.min(policy.perHostConcurrency, MAX_CONNECTIONS), opts);
    const entry = transportFor(createTransport, s, c, opts.timeoutMs, policy);
    entry.inFlight++;
    const r = msg.rendered;
    try {
      const info = await entry.transport.sendMail({
        from: s.from,
        to: { name: '', address: to },
        subject: typeof r.subject === 'string' ? r.subject : '',
        ...(typeof r.html === 'string' ? { html: r.html } : {}),
        ...(typeof r.text === 'string' ? { text: r.text } : {}),
        // Rendered content is data, never a path or URL for nodemailer to fetch.
        disableFileAccess: true,
        disableUrlAccess: true,
      });
      return { ok: true, providerMessageId: typeof info.messageId === 'string' ? info.messageId : null };
    } catch (err) {
      const result = classifySmtpError(err);
      if (result.retryAfterMs !== undefined) blockDestination(rateKey, result.retryAfterMs);
      return result;
    } finally {
      entry.inFlight--;
      entry.lastUsed = Date.now();
      release();
    }
  },
};
