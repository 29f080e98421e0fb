import type { WhatsAppCredentials, WhatsAppSettings } from '../../core/services/channels.js';
import {
  callProviderApi,
  E164_RE,
  errorText,
  isTransientStatus,
  retryAfterMsOf,
  type ApiReply,
  type OutgoingMessage,
  type Provider,
  type SendResult,
} from './api.js';

/**
 * Graph API error codes that mean "slow down" although the status is 400: app, account
 * and pair rate limits and spam throttling.
 */
const RATE_LIMIT_CODES = new Set([4, 80007, 130429, 131048, 131056]);
/** The pair rate limit (one business number to one recipient): it does not block the API for other recipients. */
const PAIR_RATE_LIMIT = 131056;

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

/** Graph errors are `{error: {message, type, code, error_subcode, fbtrace_id}}`: only code and message are kept. */
function graphError(json: unknown): { message?: string; code?: number } {
  const error = (json as { error?: { message?: unknown; code?: unknown } } | undefined)?.error;
  if (!error || typeof error !== 'object') return {};
  return {
    ...(typeof error.message === 'string' ? { message: errorText(error.message) } : {}),
    ...(typeof error.code === 'number' && Number.isInteger(error.code) ? { code: error.code } : {}),
  };
}

/** A Graph API reply as a send result; only the Graph error's code and message reach the stored error. */
export function classifyWhatsAppReply(reply: ApiReply): SendResult & { blockDestination?: boolean } {
  if (reply.status >= 200 && reply.status < 300) {
    const id = (reply.json as { messages?: { id?: unknown }[] } | undefined)?.messages?.[0]?.id;
    return { ok: true, providerMessageId: typeof id === 'string' ? errorText(id, 128) : null };
  }
  const err = graphError(reply.json);
  const detail =
    err.message !== undefined
      ? `${err.message}${err.code !== undefined ? ` (code ${err.code})` : ''}`
      : err.code !== undefined
        ? `code ${err.code}`
        : 'no details';
  const error = `whatsapp: HTTP ${reply.status}: ${detail}`;
  const rateLimitCode = err.code !== undefined && RATE_LIMIT_CODES.has(err.code);
  if (reply.status === 429 || rateLimitCode || (reply.status === 503 && reply.retryAfter !== undefined)) {
    return { ok: false, transient: true, error, retryAfterMs: retryAfterMsOf(reply), ...(err.code === PAIR_RATE_LIMIT ? { blockDestination: false } : {}) };
  }
  return { ok: false, transient: isTransientStatus(reply.status), error };
}

/** WHATSAPP through the WhatsApp Cloud API (Graph API), Bearer token. */
export const whatsappProvider: Provider = {
  name: 'whatsapp',
  async send(msg, settings, credentials, opts) {
    const s = settings as unknown as WhatsAppSettings;
    const c = credentials as unknown as WhatsAppCredentials;
    if (!E164_RE.test(msg.to)) return { ok: false, transient: false, error: 'whatsapp: the recipient is not a phone number in E.164 form' };
    const url = `${s.baseUrl}/${encodeURIComponent(s.phoneNumberId)}/messages`;
    const headers = { authorization: `Bearer ${c.accessToken}`, 'content-type': 'application/json', accept: 'application/json' };
    return callProviderApi(
      { provider: 'whatsapp', url, headers, body: JSON.stringify(whatsappPayload(msg)), account: c.accessToken, classify: classifyWhatsAppReply },
      opts,
    );
  },
};
