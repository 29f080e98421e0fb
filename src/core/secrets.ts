import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import type { Config } from './config.js';

/**
 * Secrets that svc must use again later (webhook signing secrets, provider credentials)
 * are encrypted at rest with AES-256-GCM under a key derived from the data folder's
 * `secrets.encryptionKey`. Format: v1.<iv>.<tag>.<ciphertext>, each base64url.
 */
function keyOf(config: Pick<Config, 'secrets'>): Buffer {
  return createHash('sha256').update(`svc-secrets-v1:${config.secrets.encryptionKey}`).digest();
}

export function encryptSecret(config: Pick<Config, 'secrets'>, plaintext: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', keyOf(config), iv);
  const ct = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return ['v1', iv.toString('base64url'), cipher.getAuthTag().toString('base64url'), ct.toString('base64url')].join('.');
}

export function decryptSecret(config: Pick<Config, 'secrets'>, encoded: string): string {
  const [version, iv, tag, ct] = encoded.split('.');
  if (version !== 'v1' || !iv || !tag || ct === undefined) throw new Error('unrecognised secret encoding');
  const decipher = createDecipheriv('aes-256-gcm', keyOf(config), Buffer.from(iv, 'base64url'));
  decipher.setAuthTag(Buffer.from(tag, 'base64url'));
  return Buffer.concat([decipher.update(Buffer.from(ct, 'base64url')), decipher.final()]).toString('utf8');
}
