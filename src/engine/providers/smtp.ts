import { createHash } from 'node:crypto';
import { createTransport, type Transporter } from 'nodemailer';
import type { SmtpCredentials, SmtpSettings } from '../../core/services/channels.js';
import type { Provider, SendResult } from './index.js';

/**
 * EMAIL over SMTP with nodemailer. One pooled transport per distinct server, account and
 * timeout, kept for reuse (connections close themselves when idle); a settings change
 * gives a new key, so a stale password is never reused.
 */
const transports = new Map<string, Transporter>();
const MAX_TRANSPORTS = 100;

function transportFor(settings: SmtpSettings, credentials: SmtpCredentials, timeoutMs: number): Transporter {
  const key = createHash('sha256').update(JSON.stringify([settings, credentials, timeoutMs])).digest('base64url');
  let transport = transports.get(key);
  if (transport) return transport;
  if (transports.size >= MAX_TRANSPORTS) {
    const [oldestKey, oldest] = transports.entries().next().value as [string, Transporter];
    transports.delete(oldestKey);
    oldest.close();
  }
  transport = createTransport({
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
    maxConnections: 3,
    logger: false,
  });
  transports.set(key, transport);
  return transport;
}

/** Closes every pooled SMTP connection (server shutdown, tests). */
export function closeSmtpTransports(): void {
  for (const t of transports.values()) t.close();
  transports.clear();
}

/** Failures that are about this message or this account, not the moment: do not retry. */
const PERMANENT_CODES = new Set(['EENVELOPE', 'EMESSAGE', 'EAUTH', 'ENOAUTH', 'EOAUTH2', 'ETLS', 'EREQUIRETLS', 'ECONFIG', 'EMAXRECIPIENTS']);

/**
 * SMTP says it itself: a 4xx reply (421, 450, 451, 452 ...) is temporary, a 5xx reply is
 * final. Without a reply, connection trouble and timeouts are temporary; refused
 * authentication, TLS and envelope problems are not.
 */
export function classifySmtpError(err: unknown): SendResult & { ok: false } {
  const e = err as { code?: string; responseCode?: number; response?: string; message?: string };
  if (typeof e.responseCode === 'number') {
    const reply = e.response ? e.response.replace(/\s+/g, ' ').trim() : String(e.responseCode);
    return { ok: false, transient: e.responseCode >= 400 && e.responseCode < 500, error: `smtp: the server answered ${reply}` };
  }
  const code = e.code ?? 'ERROR';
  const transient = !PERMANENT_CODES.has(code);
  const what = code === 'ETIMEDOUT' ? 'timed out' : code === 'EAUTH' || code === 'ENOAUTH' ? 'authentication failed' : (e.message ?? 'failed').replace(/\s+/g, ' ').slice(0, 300);
  return { ok: false, transient, error: `smtp: ${what} (${code})` };
}

export const smtpProvider: Provider = {
  name: 'smtp',
  async send(msg, settings, credentials, opts) {
    const s = settings as unknown as SmtpSettings;
    const transport = transportFor(s, credentials as SmtpCredentials, opts.timeoutMs);
    const r = msg.rendered;
    try {
      const info = await transport.sendMail({
        from: s.from,
        to: msg.to,
        subject: typeof r.subject === 'string' ? r.subject : '',
        ...(typeof r.html === 'string' ? { html: r.html } : {}),
        ...(typeof r.text === 'string' ? { text: r.text } : {}),
        // Rendered content is data, never a path or URL for nodemailer to fetch.
        disableFileAccess: true,
        disableUrlAccess: true,
      });
      return { ok: true, providerMessageId: typeof info.messageId === 'string' ? info.messageId : null };
    } catch (err) {
      return classifySmtpError(err);
    }
  },
};
