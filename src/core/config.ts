import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join, resolve } from 'node:path';
import type { SynchronousLevel } from './db/connection.js';

/**
 * Configuration is layered once at start-up: flags > SVC_* environment > config.json in
 * the data folder > defaults, validated into one frozen object that is passed down.
 * This module is the only place that interprets environment variables.
 */
export interface Config {
  readonly dataDir: string;
  readonly dbFile: string;
  readonly host: string;
  readonly port: number;
  readonly publicUrl: string;
  readonly logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  readonly dbSynchronous: SynchronousLevel;
  readonly defaultPhoneRegion: string;
  readonly trustProxy: boolean;
  readonly bodyLimit: number;
  readonly webhookRateLimit: number;
  readonly webhookBodyLimit: number;
  readonly webhookEventRetentionDays: number;
  readonly loginRateLimit: number;
  /** Whether `svc serve` executes runs (off: an ingest-only node; another process runs them). */
  readonly engine: boolean;
  /** Worker threads executing runs (default: the number of cores). */
  readonly workers: number;
  /** http_request and HTTP providers: private and loopback targets are refused unless allowed. */
  readonly httpAllowPrivate: boolean;
  /** host:port pairs allowed even when they resolve to private addresses. */
  readonly httpAllowedHosts: readonly string[];
  readonly httpTimeoutMs: number;
  readonly httpMaxResponseBytes: number;
  /** How long a claimed run belongs to one process before another may take it up. */
  readonly runLeaseSeconds: number;
  /** Billing: `manual` (an operator completes checkouts with the CLI) or `stripe`. */
  readonly billingProvider: 'manual' | 'stripe';
  readonly stripe: {
    readonly baseUrl: string;
    readonly secretKey: string | null;
    readonly webhookSecret: string | null;
    readonly prices: { readonly GROWTH: string | null; readonly PRO: string | null };
    /** Seconds a Stripe-Signature timestamp may be off. */
    readonly toleranceSeconds: number;
  };
  /** Days an invitation can be accepted. */
  readonly invitationDays: number;
  /** Tries per message before a transient failure fails the step. */
  readonly deliveryMaxAttempts: number;
  /** The first retry waits about this long; each further one twice as long, with jitter. */
  readonly deliveryRetryBaseMs: number;
  readonly secrets: { readonly jwtSecret: string; readonly encryptionKey: string };
}

export type ConfigFlags = Partial<{ dataDir: string; host: string; port: string | number; publicUrl: string; logLevel: string }>;

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

export class NotInitialisedError extends ConfigError {
  constructor(dataDir: string) {
    super(`${dataDir} is not an svc data folder yet; run "svc init --data-dir ${dataDir}" (or "svc serve", which initialises an empty one)`);
    this.name = 'NotInitialisedError';
  }
}

function toRegion(value: unknown): string {
  if (value === undefined) return 'US';
  const s = String(value).trim().toUpperCase();
  if (!/^[A-Z]{2}$/.test(s)) throw new ConfigError(`defaultPhoneRegion must be a two-letter country code such as US or DE, got ${JSON.stringify(value)}`);
  return s;
}

export const CONFIG_FILE = 'config.json';
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

type FileConfig = Partial<Record<Exclude<keyof Config, 'secrets' | 'dataDir' | 'dbFile'>, unknown>> & {
  stripe?: unknown;
  secrets?: { jwtSecret?: unknown; encryptionKey?: unknown };
};

export function resolveDataDir(flag: string | undefined, env: NodeJS.ProcessEnv): string {
  return resolve(flag ?? env.SVC_DATA_DIR ?? './data');
}

export function configPath(dataDir: string): string {
  return join(dataDir, CONFIG_FILE);
}

export function isInitialised(dataDir: string): boolean {
  return existsSync(configPath(dataDir));
}

function readFileConfig(dataDir: string): FileConfig {
  const file = configPath(dataDir);
  if (!existsSync(file)) return {};
  try {
    const parsed: unknown = JSON.parse(readFileSync(file, 'utf8'));
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
    return parsed as FileConfig;
  } catch (err) {
    throw new ConfigError(`${file} is not valid JSON: ${(err as Error).message}`);
  }
}

/** Writes a fresh config.json with generated secrets (mode 0600); never overwrites one. */
export function writeInitialConfig(dataDir: string): void {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const file = configPath(dataDir);
  if (existsSync(file)) return;
  const initial = {
    secrets: {
      jwtSecret: randomBytes(32).toString('base64url'),
      encryptionKey: randomBytes(32).toString('base64url'),
    },
  };
  writeFileSync(file, `${JSON.stringify(initial, null, 2)}\n`, { mode: 0o600, flag: 'wx' });
}

function pick(...values: unknown[]): unknown {
  for (const v of values) if (v !== undefined && v !== null && v !== '') return v;
  return undefined;
}

function toInt(name: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  const n = typeof value === 'number' ? value : Number(String(value).trim());
  if (!Number.isInteger(n) || n < min || n > max) throw new ConfigError(`${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(value)}`);
  return n;
}

function toBool(name: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value === 'boolean') return value;
  const s = String(value).trim().toLowerCase();
  if (['1', 'true', 'yes', 'on'].includes(s)) return true;
  if (['0', 'false', 'no', 'off'].includes(s)) return false;
  throw new ConfigError(`${name} must be true or false, got ${JSON.stringify(value)}`);
}

function toEnum<T extends string>(name: string, value: unknown, allowed: readonly T[], fallback: T): T {
  if (value === undefined) return fallback;
  const s = String(value).trim();
  const match = allowed.find((a) => a.toLowerCase() === s.toLowerCase());
  if (!match) throw new ConfigError(`${name} must be one of ${allowed.join(', ')}, got ${JSON.stringify(value)}`);
  return match;
}

function toList(value: unknown): string[] {
  if (value === undefined) return [];
  const items = Array.isArray(value) ? value.map(String) : String(value).split(',');
  return items.map((s) => s.trim().toLowerCase()).filter(Boolean);
}

function optionalText(value: unknown): string | null {
  return value === undefined ? null : String(value);
}

function toSecret(name: string, value: unknown): string {
  if (typeof value !== 'string' || value.length < 32) {
    throw new ConfigError(`${name} is missing or too short in ${CONFIG_FILE}; run "svc init" on a fresh data folder or restore the file`);
  }
  return value;
}

export function loadConfig(flags: ConfigFlags = {}, env: NodeJS.ProcessEnv = process.env): Config {
  const dataDir = resolveDataDir(flags.dataDir, env);
  if (!isInitialised(dataDir)) throw new NotInitialisedError(dataDir);
  const file = readFileConfig(dataDir);
  const fileStripe = (file.stripe ?? {}) as Record<string, unknown> & { prices?: Record<string, unknown> };

  const host = String(pick(flags.host, env.SVC_HOST, file.host) ?? '127.0.0.1');
  const port = toInt('port', pick(flags.port, env.SVC_PORT, file.port), 3000, 0, 65535);
  const publicUrlRaw = pick(flags.publicUrl, env.SVC_PUBLIC_URL, file.publicUrl);
  let publicUrl: string;
  if (publicUrlRaw) {
    try {
      const u = new URL(String(publicUrlRaw));
      if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('protocol');
      publicUrl = u.toString().replace(/\/+$/, '');
    } catch {
      throw new ConfigError(`publicUrl must be an http(s) URL, got ${JSON.stringify(publicUrlRaw)}`);
    }
  } else {
    const shownHost = host === '0.0.0.0' || host === '::' ? 'localhost' : host.includes(':') ? `[${host}]` : host;
    publicUrl = `http://${shownHost}:${port}`;
  }

  const config: Config = {
    dataDir,
    dbFile: join(dataDir, 'svc.db'),
    host,
    port,
    publicUrl,
    logLevel: toEnum('logLevel', pick(flags.logLevel, env.SVC_LOG_LEVEL, file.logLevel), LOG_LEVELS, 'info'),
    dbSynchronous: toEnum('dbSynchronous', pick(env.SVC_DB_SYNCHRONOUS, file.dbSynchronous), ['FULL', 'NORMAL'] as const, 'FULL'),
    defaultPhoneRegion: toRegion(pick(env.SVC_DEFAULT_PHONE_REGION, file.defaultPhoneRegion)),
    trustProxy: toBool('trustProxy', pick(env.SVC_TRUST_PROXY, file.trustProxy), false),
    bodyLimit: toInt('bodyLimit', pick(env.SVC_BODY_LIMIT, file.bodyLimit), 1024 * 1024, 1024, 64 * 1024 * 1024),
    webhookRateLimit: toInt('webhookRateLimit', pick(env.SVC_WEBHOOK_RATE_LIMIT, file.webhookRateLimit), 120, 1, 1_000_000),
    webhookBodyLimit: toInt('webhookBodyLimit', pick(env.SVC_WEBHOOK_BODY_LIMIT, file.webhookBodyLimit), 1024 * 1024, 1024, 64 * 1024 * 1024),
    webhookEventRetentionDays: toInt('webhookEventRetentionDays', pick(env.SVC_WEBHOOK_EVENT_RETENTION_DAYS, file.webhookEventRetentionDays), 7, 1, 3650),
    engine: toBool('engine', pick(env.SVC_ENGINE, file.engine), true),
    workers: toInt('workers', pick(env.SVC_WORKERS, file.workers), Math.max(1, availableParallelism()), 1, 64),
    httpAllowPrivate: toBool('httpAllowPrivate', pick(env.SVC_HTTP_ALLOW_PRIVATE, file.httpAllowPrivate), false),
    httpAllowedHosts: toList(pick(env.SVC_HTTP_ALLOWED_HOSTS, file.httpAllowedHosts)),
    httpTimeoutMs: toInt('httpTimeoutMs', pick(env.SVC_HTTP_TIMEOUT_MS, file.httpTimeoutMs), 10_000, 100, 300_000),
    httpMaxResponseBytes: toInt('httpMaxResponseBytes', pick(env.SVC_HTTP_MAX_RESPONSE_BYTES, file.httpMaxResponseBytes), 1024 * 1024, 1024, 64 * 1024 * 1024),
    runLeaseSeconds: toInt('runLeaseSeconds', pick(env.SVC_RUN_LEASE_SECONDS, file.runLeaseSeconds), 30, 1, 3600),
    billingProvider: toEnum('billingProvider', pick(env.SVC_BILLING_PROVIDER, file.billingProvider), ['manual', 'stripe'] as const, 'manual'),
    stripe: {
      baseUrl: String(pick(env.SVC_STRIPE_BASE_URL, fileStripe.baseUrl) ?? 'https://api.stripe.com').replace(/\/+$/, ''),
      secretKey: optionalText(pick(env.SVC_STRIPE_SECRET_KEY, fileStripe.secretKey)),
      webhookSecret: optionalText(pick(env.SVC_STRIPE_WEBHOOK_SECRET, fileStripe.webhookSecret)),
      prices: {
        GROWTH: optionalText(pick(env.SVC_STRIPE_PRICE_GROWTH, fileStripe.prices?.GROWTH)),
        PRO: optionalText(pick(env.SVC_STRIPE_PRICE_PRO, fileStripe.prices?.PRO)),
      },
      toleranceSeconds: toInt('stripe.toleranceSeconds', pick(env.SVC_STRIPE_TOLERANCE_SECONDS, fileStripe.toleranceSeconds), 300, 1, 86_400),
    },
    invitationDays: toInt('invitationDays', pick(env.SVC_INVITATION_DAYS, file.invitationDays), 7, 1, 365),
    deliveryMaxAttempts: toInt('deliveryMaxAttempts', pick(env.SVC_DELIVERY_MAX_ATTEMPTS, file.deliveryMaxAttempts), 5, 1, 50),
    deliveryRetryBaseMs: toInt('deliveryRetryBaseMs', pick(env.SVC_DELIVERY_RETRY_BASE_MS, file.deliveryRetryBaseMs), 1000, 1, 3_600_000),
    loginRateLimit: toInt('loginRateLimit', pick(env.SVC_LOGIN_RATE_LIMIT, file.loginRateLimit), 10, 1, 100_000),
    secrets: {
      jwtSecret: toSecret('secrets.jwtSecret', file.secrets?.jwtSecret),
      encryptionKey: toSecret('secrets.encryptionKey', file.secrets?.encryptionKey),
    },
  };
  return deepFreeze(config);
}

function deepFreeze<T extends object>(o: T): T {
  for (const v of Object.values(o)) if (v && typeof v === 'object') deepFreeze(v as object);
  return Object.freeze(o);
}
