import type { TwilioCredentials, TwilioSettings } from '../../core/services/channels.js';
import { excerpt, isTransientStatus, networkFailure, postToProvider, type Provider } from './index.js';

/** Twilio's Messaging Service ids: sent as MessagingServiceSid instead of From. */
const MESSAGING_SERVICE_RE = /^MG[0-9a-fA-F]{32}$/;

/** Twilio errors are `{code, message, more_info, status}`. */
function twilioError(json: unknown, text: string): string {
  const body = json as { code?: unknown; message?: unknown } | undefined;
  if (body && typeof body.message === 'string') return `${body.message}${body.code !== undefined ? ` (code ${String(body.code)})` : ''}`;
  return excerpt(text) || 'no details';
}

/** SMS through a Twilio-compatible Messages API: form-encoded, HTTP Basic auth. */
export const twilioProvider: Provider = {
  name: 'twilio',
  async send(msg, settings, credentials, opts) {
    const s = settings as unknown as TwilioSettings;
    const c = credentials as unknown as TwilioCredentials;
    const form = new URLSearchParams({ To: msg.to, Body: typeof msg.rendered.text === 'string' ? msg.rendered.text : '' });
    form.set(MESSAGING_SERVICE_RE.test(s.from) ? 'MessagingServiceSid' : 'From', s.from);
    const url = `${s.baseUrl}/2010-04-01/Accounts/${encodeURIComponent(s.accountSid)}/Messages.json`;
    const headers = {
      authorization: `Basic ${Buffer.from(`${s.accountSid}:${c.authToken}`).toString('base64')}`,
      'content-type': 'application/x-www-form-urlencoded',
      accept: 'application/json',
    };
    let reply;
    try {
      reply = await postToProvider(url, headers, form.toString(), opts.timeoutMs);
    } catch (err) {
      return networkFailure('twilio', err);
    }
    if (reply.status >= 200 && reply.status < 300) {
      const sid = (reply.json as { sid?: unknown } | undefined)?.sid;
      return { ok: true, providerMessageId: typeof sid === 'string' ? sid : null };
    }
    return { ok: false, transient: isTransientStatus(reply.status), error: `twilio: HTTP ${reply.status}: ${twilioError(reply.json, reply.text)}` };
  },
};
