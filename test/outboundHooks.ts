import { after, afterEach } from 'node:test';
import { closeOutbound } from '../src/engine/outbound.js';
import { closeSmtpTransports } from '../src/engine/providers/smtp.js';

/**
 * For test files that call providers directly: pooled SMTP transports and keep-alive
 * agents are closed after each test, and the returned closers (local servers) after all.
 */
export function outboundHooks(): Array<() => Promise<void>> {
  const closers: Array<() => Promise<void>> = [];
  afterEach(async () => {
    closeSmtpTransports();
    await closeOutbound();
  });
  after(async () => {
    await Promise.all(closers.map((c) => c()));
  });
  return closers;
}
