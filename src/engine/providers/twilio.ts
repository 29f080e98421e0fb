import type { TwilioCredentials, TwilioSettings } from '../../core/services/channels.js';
import { callProviderApi, E164_RE, errorText, isTransientStatus, retryAfterMsOf, type ApiReply, type Provider, type SendResult } from './api.js';

/** Twilio's Messaging Service ids: sent as MessagingServiceSid instead of From. */
const MESSAGING_SERVICE_RE = /^MG[0-9a-fA-F]{32}$/;
/** Twilio's "Too Many Requests" error code. */
const TWILIO_RATE_LIMIT = 20429;

/** Twilio errors are `{code, message, more_info, status}`: only code and message are kept. */
function twilioError(json: unknown): { code?: string; message?: string } {
  const body = json as { code?: unknown; message?: unknown } | undefined;
  if (!body || typeof body !== 'object') return {};
  const code = typeof body.code === 'number' || (typeof body.code === 'string' && /^\d{1,8}$/.test(body.code)) ? String(body.code) : undefined;
  return { ...(code !== undefined ? { code } : {}), ...(typeof body.message === 'string' ? { message: errorText(body.message) } : {}) };
}

/** A Twilio reply as a send result; only Twilio's own error fields reach the stored error. */
export function classifyTwilioReply(reply: ApiReply): SendResult {
  if (reply.status >= 200 && reply.status < 300) {
    const sid = (reply.json as { sid?: unknown } | undefined)?.sid;
    return { ok: true, providerMessageId: typeof sid === 'string' ? errorText(sid, 64) : null };
  }
  const err = twilioError(reply.json);
  const detail =
    err.message !== undefined
      ? `${err.message}${err.code !== undefined ? ` (code ${err.code})` : ''}`
      : err.code !== undefined
        ? `code ${err.code}`
        : 'no details';
  const error = `twilio: HTTP ${reply.status}: ${detail}`;
  if (reply.status === 429 || err.code === String(TWILIO_RATE_LIMIT) || (reply.status === 503 && reply.retryAfter !== undefined)) {
    return { ok: false, transient: true, error, retryAfterMs: retryAfterMsOf(reply) };
  }
  return { ok: false, transient: isTransientStatus(reply.status), error };
}

/** SMS through a Twilio-compatible Messages API: form-encoded, HTTP Basic auth. */
export const twilioProvider: Provider = {
  name: 'twilio',
  async send(msg, settings, credentials, opts) {
    const s = settings as unknown as TwilioSettings;
    const c = credentials as unknown as TwilioCredentials;
    if (!E164_RE.test(msg.to)) return { ok: false, transient: false, error: 'twilio: the recipient is not a phone number in E.164 form' };
    const form = new URLSearchParams({ To: msg.to, Body: typeof msg.rendered.text === 'string' ? msg.rendered.text : '' });
    form.set(MESSAGING_SERVICE_RE.test(s.from) ? 'MessagingServiceSid' : 'From', s.from);
    const url = `${s.baseUrl}/2010-04-01/Accounts/${encodeURIComponent(s.accountSid)}/Messages.json`;
    const headers = {
      authorization: `Basic ${Buffer.from(`${s.accountSid}:${c.authToken}`).toString('base64')}`,
      'content-type': 'application/x-www-form-urlencoded',
      accept: 'application/json',
    };
    return callProviderApi(
      { provider: 'twilio', url, headers, body: form.toString(), account: `${s.accountSid}:${c.authToken}`, classify: classifyTwilioReply },
      opts,
    );
  },
};
