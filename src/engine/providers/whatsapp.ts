import type { WhatsAppCredentials, WhatsAppSettings } from '../../core/services/channels.js';
import { excerpt, isTransientStatus, networkFailure, postToProvider, type OutgoingMessage, type Provider } from './index.js';

/**
 * Graph API error codes that mean "slow down" although the status is 400: app, account
 * and pair rate limits and spam throttling.
 */
const RATE_LIMIT_CODES = new Set([4, 80007, 130429, 131048, 131056]);

/** The Cloud API message: free text, or an approved template with body parameters. */
export function whatsappPayload(msg: OutgoingMessage): Record<string, unknown> {
  const r = msg.rendered;
  // The Cloud API takes the number as digits, without + or spaces.
  const base = { messaging_product: 'whatsapp', recipient_type: 'individual', to: msg.to.replace(/[^0-9]/g, '') };
  if (typeof r.templateName === 'string') {
    const parameters = Array.isArray(r.parameters) ? r.parameters.map((p) => ({ type: 'text', text: String(p) })) : [];
    return {
      ...base,
      type: 'template',
      template: {
        name: r.templateName,
        language: { code: typeof r.language === 'string' ? r.language : 'en_US' },
        ...(parameters.length ? { components: [{ type: 'body', parameters }] } : {}),
      },
    };
  }
  return { ...base, type: 'text', text: { body: typeof r.text === 'string' ? r.text : '' } };
}

/** Graph errors are `{error: {message, type, code, error_subcode, fbtrace_id}}`. */
function graphError(json: unknown): { message?: string; code?: number } {
  const error = (json as { error?: { message?: unknown; code?: unknown } } | undefined)?.error;
  if (!error || typeof error !== 'object') return {};
  return {
    ...(typeof error.message === 'string' ? { message: error.message } : {}),
    ...(typeof error.code === 'number' ? { code: error.code } : {}),
  };
}

/** WHATSAPP through the WhatsApp Cloud API (Graph API), Bearer token. */
export const whatsappProvider: Provider = {
  name: 'whatsapp',
  async send(msg, settings, credentials, opts) {
    const s = settings as unknown as WhatsAppSettings;
    const c = credentials as unknown as WhatsAppCredentials;
    const url = `${s.baseUrl}/${encodeURIComponent(s.phoneNumberId)}/messages`;
    const headers = { authorization: `Bearer ${c.accessToken}`, 'content-type': 'application/json', accept: 'application/json' };
    let reply;
    try {
      reply = await postToProvider(url, headers, JSON.stringify(whatsappPayload(msg)), opts.timeoutMs);
    } catch (err) {
      return networkFailure('whatsapp', err);
    }
    if (reply.status >= 200 && reply.status < 300) {
      const id = (reply.json as { messages?: { id?: unknown }[] } | undefined)?.messages?.[0]?.id;
      return { ok: true, providerMessageId: typeof id === 'string' ? id : null };
    }
    const err = graphError(reply.json);
    const detail = err.message ? `${err.message}${err.code !== undefined ? ` (code ${err.code})` : ''}` : excerpt(reply.text) || 'no details';
    const transient = isTransientStatus(reply.status) || (err.code !== undefined && RATE_LIMIT_CODES.has(err.code));
    return { ok: false, transient, error: `whatsapp: HTTP ${reply.status}: ${detail}` };
  },
};
