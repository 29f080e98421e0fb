import { request } from 'undici';
import type { Channel, ProviderName } from '../../core/db/schema.js';
import { outboxProvider } from './outbox.js';
import { smtpProvider } from './smtp.js';
import { twilioProvider } from './twilio.js';
import { whatsappProvider } from './whatsapp.js';

/**
 * Delivery providers: one send per call, no retries (the caller decides, from `transient`,
 * whether to try again). A provider never throws for a delivery problem; it answers with
 * a SendResult whose error text is safe to store and show (never a credential).
 */
export interface OutgoingMessage {
  channel: Channel;
  to: string;
  rendered: Record<string, unknown>;
}

export type SendResult = { ok: true; providerMessageId: string | null } | { ok: false; transient: boolean; error: string };

export interface SendOptions {
  timeoutMs: number;
}

export interface Provider {
  readonly name: ProviderName;
  send(msg: OutgoingMessage, settings: Record<string, unknown>, credentials: Record<string, unknown>, opts: SendOptions): Promise<SendResult>;
}

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

/** A reply of an HTTP provider API: status and (when JSON) the parsed body. */
export interface ApiReply {
  status: number;
  json: unknown;
  text: string;
}

/** Provider replies are read up to this size; an error text needs no more. */
const MAX_REPLY_BYTES = 64 * 1024;

/**
 * One POST to a provider's HTTP API, bounded by the timeout from connect to last byte.
 * No redirects are followed. Throws only for network problems and timeouts.
 */
export async function postToProvider(url: string, headers: Record<string, string>, body: string, timeoutMs: number): Promise<ApiReply> {
  const res = await request(url, {
    method: 'POST',
    headers,
    body,
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    signal: AbortSignal.timeout(timeoutMs),
  });
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res.body) {
    const buf = chunk as Buffer;
    size += buf.length;
    if (size > MAX_REPLY_BYTES) {
      chunks.push(buf.subarray(0, buf.length - (size - MAX_REPLY_BYTES)));
      res.body.destroy();
      break;
    }
    chunks.push(buf);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  let json: unknown = undefined;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.statusCode, json, text };
}

/** Rate limiting, timeouts and server errors may pass; other refusals will not. */
export function isTransientStatus(status: number): boolean {
  return status === 408 || status === 425 || status === 429 || status >= 500;
}

/** A network failure or timeout of an HTTP provider: always worth another try. */
export function networkFailure(provider: ProviderName, err: unknown): SendResult {
  const e = err as { name?: string; code?: string; cause?: { code?: string } };
  const code = e.code ?? e.cause?.code;
  const reason =
    e.name === 'TimeoutError' || e.name === 'AbortError' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT'
      ? 'timed out'
      : `could not be reached${code ? ` (${code})` : ''}`;
  return { ok: false, transient: true, error: `${provider}: the provider API ${reason}` };
}

/** A short, single-line excerpt of a provider's reply for the attempt's error. */
export function excerpt(text: string, max = 300): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}
