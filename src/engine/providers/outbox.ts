import { randomUUID } from 'node:crypto';
import type { Provider } from './api.js';

/**
 * The built-in default for every channel: nothing leaves the server. The rendered message
 * is kept on its delivery attempt row, which is where a user reads it.
 */
export const outboxProvider: Provider = {
  name: 'outbox',
  async send() {
    return { ok: true, providerMessageId: `outbox-${randomUUID()}` };
  },
};
