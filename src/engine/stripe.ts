import { createHmac, timingSafeEqual } from 'node:crypto';
import type { Config } from '../core/config.js';
import { loadUndici } from './outbound.js';

/**
 * The small part of Stripe's API that billing uses: creating a Checkout Session over HTTP
 * (form-encoded, Bearer secret key) and verifying the `Stripe-Signature` header of its
 * webhooks. The base URL is operator configuration, so tests can stand a local server in.
 */
export const STRIPE_SIGNATURE_HEADER = 'stripe-signature';
const MAX_REPLY_BYTES = 256 * 1024;

export interface StripeSession {
  id: string;
  url: string | null;
}

/** Why a call to Stripe failed, for the log; never shown to the API caller as it stands. */
export class StripeError extends Error {
  constructor(
    message: string,
    readonly status: number | null,
  ) {
    super(message);
    this.name = 'StripeError';
  }
}

export async function createCheckoutSession(
  config: Config,
  input: { checkoutId: number; price: string; successUrl: string; cancelUrl: string },
): Promise<StripeSession> {
  const form = new URLSearchParams();
  form.set('mode', 'subscription');
  form.set('line_items[0][price]', input.price);
  form.set('line_items[0][quantity]', '1');
  form.set('success_url', input.successUrl);
  form.set('cancel_url', input.cancelUrl);
  form.set('client_reference_id', String(input.checkoutId));
  form.set('metadata[checkoutId]', String(input.checkoutId));
  const timeoutMs = config.httpTimeoutMs;
  let status: number;
  let text: string;
  try {
    const { request } = await loadUndici();
    const res = await request(`${config.stripe.baseUrl}/v1/checkout/sessions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${config.stripe.secretKey ?? ''}`,
        'content-type': 'application/x-www-form-urlencoded',
        'idempotency-key': `svc-checkout-${input.checkoutId}`,
      },
      body: form.toString(),
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      signal: AbortSignal.timeout(timeoutMs),
    });
    status = res.statusCode;
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body) {
      size += (chunk as Buffer).length;
      if (size > MAX_REPLY_BYTES) {
        res.body.destroy();
        throw new StripeError('Stripe answered with an oversized body', status);
      }
      chunks.push(chunk as Buffer);
    }
    text = Buffer.concat(chunks).toString('utf8');
  } catch (err) {
    if (err instanceof StripeError) throw err;
    throw new StripeError(`Stripe could not be reached: ${(err as Error).message}`, null);
  }
  if (status < 200 || status >= 300) throw new StripeError(`Stripe answered ${status}`, status);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new StripeError('Stripe answered with a body that is not JSON', status);
  }
  const id = (json as { id?: unknown })?.id;
  const url = (json as { url?: unknown })?.url;
  if (typeof id !== 'string' || !id) throw new StripeError('Stripe answered without a session id', status);
  return { id, url: typeof url === 'string' ? url : null };
}

/**
 * Checks a `Stripe-Signature` header (`t=<unix seconds>,v1=<hex>[,v1=<hex>...]`): some v1
 * value must equal HMAC-SHA256(secret, `${t}.${rawBody}`), compared in constant time, and t
 * must be within the tolerance of now. Returns false for anything missing or malformed.
 */
export function verifyStripeSignature(
  header: string | undefined,
  raw: Buffer,
  secret: string,
  toleranceSeconds: number,
  nowSeconds = Math.floor(Date.now() / 1000),
): boolean {
  if (!header || !secret) return false;
  let timestamp: string | undefined;
  const signatures: string[] = [];
  for (const part of header.split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const key = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (key === 't') timestamp = value;
    else if (key === 'v1') signatures.push(value);
  }
  if (!timestamp || !/^[0-9]{1,12}$/.test(timestamp) || !signatures.length) return false;
  if (Math.abs(nowSeconds - Number(timestamp)) > toleranceSeconds) return false;
  const expected = createHmac('sha256', secret).update(`${timestamp}.`).update(raw).digest();
  let ok = false;
  for (const sig of signatures) {
    if (!/^[0-9a-f]{64}$/i.test(sig)) continue;
    if (timingSafeEqual(expected, Buffer.from(sig, 'hex'))) ok = true;
  }
  return ok;
}

/** Builds a header the way Stripe does (tests, and a local stand-in). */
export function signStripePayload(raw: string | Buffer, secret: string, timestamp = Math.floor(Date.now() / 1000)): string {
  const sig = createHmac('sha256', secret).update(`${timestamp}.`).update(raw).digest('hex');
  return `t=${timestamp},v1=${sig}`;
}
