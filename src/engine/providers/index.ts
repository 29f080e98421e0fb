import type { ProviderName } from '../../core/db/schema.js';
import type { Provider } from './api.js';
import { outboxProvider } from './outbox.js';
import { smtpProvider } from './smtp.js';
import { twilioProvider } from './twilio.js';
import { whatsappProvider } from './whatsapp.js';

/**
 * Delivery providers: one send per call, no retries (the caller decides, from `transient`
 * and `retryAfterMs`, whether and when to try again). A provider never throws for a
 * delivery problem; it answers with a SendResult whose error text is safe to store and
 * show (never a credential, never a raw reply body or banner).
 *
 * Every connection a provider opens goes through the guarded connector of ../outbound.ts,
 * with the policy passed in SendOptions.outbound (or the one set by configureOutbound).
 */
export {
  callProviderApi,
  errorText,
  excerpt,
  isTransientStatus,
  networkFailure,
  postToProvider,
  type ApiReply,
  type OutgoingMessage,
  type Provider,
  type SendOptions,
  type SendResult,
} from './api.js';

export function providerFor(name: ProviderName): Provider {
  switch (name) {
    case 'outbox':
      return outboxProvider;
    case 'smtp':
      return smtpProvider;
    case 'twilio':
      return twilioProvider;
    case 'whatsapp':
      return whatsappProvider;
  }
}
