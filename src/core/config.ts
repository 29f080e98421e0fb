import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
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
  /**
   * A PostgreSQL server (postgres://…) holding all data instead of the SQLite file in the
   * data folder (null: SQLite). Several nodes share one.
   */
  readonly databaseUrl: string | null;
  /**
   * A Redis server (redis://… or rediss://…) that the nodes of a cluster share for what must
   * be counted across them (the per-address webhook limit); null: counted per node.
   */
  readonly redisUrl: string | null;
  /** Prefixes every key svc writes to Redis, so that clusters (or tests) can share one server. */
  readonly redisPrefix: string;
  readonly host: string;
  readonly port: number;
  readonly publicUrl: string;
  /**
   * The sandbox base address: webhook URLs of sandbox workflows are minted under it, and a
   * request whose Host names it (when it differs from publicUrl's) reaches only sandboxes.
   * Default: publicUrl (one address; the credential alone tells the sides apart).
   */
  readonly sandboxUrl: string;
  /**
   * Whether publicUrl (sandboxUrl) was configured rather than made up of host and port: a CLI
   * process then names a running server's own address instead (cli/io.ts).
   */
  readonly publicUrlConfigured?: boolean;
  readonly sandboxUrlConfigured?: boolean;
  readonly logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  readonly dbSynchronous: SynchronousLevel;
  readonly defaultPhoneRegion: string;
  /**
   * Which proxies in front of svc are trusted to say who the client is (X-Forwarded-For):
   * false (none), a hop count, or addresses/CIDRs. Never "every hop".
   */
  readonly trustProxy: false | number | readonly string[];
  readonly bodyLimit: number;
  /** A request whose body goes this long without a byte arriving is answered 408 and closed. */
  readonly bodyTimeoutSeconds: number;
  readonly webhookRateLimit: number;
  readonly webhookBodyLimit: number;
  /** The largest contact import accepted (POST /contacts/import); a larger declared length is refused with 413. */
  readonly importMaxBytes: number;
  /** Imports up to this many declared bytes are answered when done; larger or unsized ones run as a job (202). */
  readonly importSyncBytes: number;
  /** Imports RUNNING at once in one workspace at most; one more is refused with 429 too_many_imports. */
  readonly importConcurrency: number;
  /** Exports streaming at once from one workspace on this node at most; one more is refused with 429 too_many_exports. */
  readonly exportConcurrency: number;
  readonly webhookEventRetentionDays: number;
  /** Days a finished run (COMPLETED or FAILED) is kept; 0 keeps runs for ever. */
  readonly runRetentionDays: number;
  /** Days a finished delivery attempt (SENT or FAILED) is kept; 0 keeps them for ever. */
  readonly deliveryRetentionDays: number;
  /** Days an audit entry is kept; 0 keeps them for ever. */
  readonly auditRetentionDays: number;
  /** Days a session is kept after its end (its refresh tokens then fail as unknown). */
  readonly sessionRetentionDays: number;
  readonly loginRateLimit: number;
  /** Template previews and test emails per caller (user or API key) per minute. */
  readonly renderRateLimit: number;
  /** Runs started by hand (automation runs, webhook-event replays) per caller per minute. */
  readonly runStartRateLimit: number;
  /** Whether `svc serve` executes runs (off: an ingest-only node; another process runs them). */
  readonly engine: boolean;
  /** Worker threads executing runs (default: one per core but the one the main thread needs, at least one). */
  readonly workers: number;
  /** http_request and HTTP providers: private and loopback targets are refused unless allowed. */
  readonly httpAllowPrivate: boolean;
  /** host:port pairs allowed even when they resolve to private addresses. */
  readonly httpAllowedHosts: readonly string[];
  readonly httpTimeoutMs: number;
  readonly httpMaxResponseBytes: number;
  /** Outbound connections (HTTP requests, SMTP sends) in flight to one host:port per thread; more wait in line. */
  readonly outboundPerHostConcurrency: number;
  /** How long a claimed run belongs to one process before another may take it up. */
  readonly runLeaseSeconds: number;
  /** Runs this process executes at once (in flight across all worker threads). */
  readonly runConcurrency: number;
  /**
   * `svc serve`: how far (percent) V8 lets a heap grow past what its last full collection
   * kept before it collects again; 0 leaves V8's own heuristics (cli/serve.ts).
   */
  readonly heapGrowthPercent: number;
  /** Runs of one workspace this process executes at once. */
  readonly workspaceConcurrency: number;
  /** On SIGTERM, how long in-flight runs may finish before they are released to other processes. */
  readonly shutdownGraceSeconds: number;
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
  /** Days a login session lasts at most, counted from the login; refreshing never extends it. */
  readonly sessionMaxDays: number;
  /** Tries per message before a transient failure fails the step. */
  readonly deliveryMaxAttempts: number;
  /** The first retry waits about this long; each further one twice as long, with jitter. */
  readonly deliveryRetryBaseMs: number;
  /** Scheduled backups of `svc serve`: the folder (null: off), seconds between two, and how many to keep. */
  readonly backup: { readonly dir: string | null; readonly intervalSeconds: number; readonly keep: number };
  /** GET /metrics on the public port needs `Authorization: Bearer <token>` (null: not served there). */
  readonly metricsToken: string | null;
  /** A second listener on 127.0.0.1 serving only /metrics, without a token (null: none). */
  readonly metricsPort: number | null;
  /** A folder holding a built console to serve instead of the one shipped with svc (null: the shipped one). */
  readonly consoleDir: string | null;
  /** Log lines: `pretty` (for people), `json` (for machines), or `auto` (pretty on a terminal). */
  readonly logFormat: 'auto' | 'pretty' | 'json';
  readonly secrets: { readonly jwtSecret: string; readonly encryptionKey: string };
}

export type ConfigFlags = Partial<{
  dataDir: string;
  databaseUrl: string;
  redisUrl: string;
  host: string;
  port: string | number;
  publicUrl: string;
  logLevel: string;
  metricsPort: string | number;
}>;

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

/**
 * The data folder named by --data-dir, SVC_DATA_DIR or ./data. A path that exists and is not a
 * folder (a file given by mistake) is refused here, for every command alike, rather than
 * failing later as "not initialised" or as a raw ENOTDIR.
 */
export function resolveDataDir(flag: string | undefined, env: NodeJS.ProcessEnv): string {
  // An empty value (`SVC_DATA_DIR=`) is no value: it meant the current folder, where init
  // wrote its files among whatever was there.
  const dir = resolve((pick(flag, env.SVC_DATA_DIR) as string | undefined) ?? './data');
  const stat = statSync(dir, { throwIfNoEntry: false });
  if (stat && !stat.isDirectory()) throw new ConfigError(`the data folder ${dir} is a file, not a folder: name another with --data-dir (or SVC_DATA_DIR)`);
  return dir;
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

/**
 * The data folder, made private (0700) whether svc creates it or it was there, empty, before:
 * mkdir's mode applies only to a folder it creates, and `svc doctor` fails one others can read.
 * A folder that already holds anything keeps its mode (`--data-dir /tmp` must not close /tmp).
 */
export function privateDataDir(dataDir: string): void {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  if (readdirSync(dataDir).length > 0) return;
  try {
    chmodSync(dataDir, 0o700);
  } catch {
    // A folder of another owner (root:svc 2770, made for the svc user): left as it is; svc doctor says so.
  }
}

/** Writes a fresh config.json with generated secrets (mode 0600); never overwrites one. */
export function writeInitialConfig(dataDir: string): void {
  const file = configPath(dataDir);
  if (existsSync(file)) return;
  privateDataDir(dataDir);
  const initial = {
    secrets: {
      jwtSecret: randomBytes(32).toString('base64url'),
      encryptionKey: randomBytes(32).toString('base64url'),
    },
  };
  writeFileSync(file, `${JSON.stringify(initial, null, 2)}\n`, { mode: 0o600, flag: 'wx' });
}

/**
 * The config.json of a node that takes its secrets from the environment (another node of a
 * cluster): the folder's settings only, no secrets of its own.
 */
export function writeNodeConfig(dataDir: string): void {
  const file = configPath(dataDir);
  if (existsSync(file)) return;
  privateDataDir(dataDir);
  writeFileSync(file, '{}\n', { mode: 0o600, flag: 'wx' });
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

const TRUST_PROXY_FORMS = 'a hop count such as 1, or a comma-separated list of proxy addresses/CIDRs such as 10.0.0.0/8,127.0.0.1 (false or 0 for none)';

/**
 * Trusted proxies: a hop count or addresses/CIDRs, as Fastify's trustProxy takes them.
 * "true" would trust every hop, so anyone could pick their address with X-Forwarded-For
 * (defeating per-address limits and forging logged addresses): it is refused, as is
 * a /0 range, which says the same thing.
 */
export function toTrustProxy(value: unknown): false | number | string[] {
  if (value === undefined || value === false || value === 0) return false;
  const refuse = (why: string) => new ConfigError(`trustProxy ${why}; use ${TRUST_PROXY_FORMS}`);
  if (value === true) throw refuse('true would trust every hop, so any client could choose its address');
  if (typeof value === 'number') {
    if (Number.isInteger(value) && value >= 1 && value <= 32) return value;
    throw refuse(`must be a hop count from 1 to 32, got ${JSON.stringify(value)}`);
  }
  const items = (Array.isArray(value) ? value.map(String) : String(value).split(',')).map((s) => s.trim()).filter(Boolean);
  if (!items.length) return false;
  if (items.length === 1) {
    const only = items[0]!.toLowerCase();
    if (only === 'false' || only === '0' || only === 'no' || only === 'off') return false;
    if (only === 'true' || only === 'yes' || only === 'on')
      throw refuse(`${JSON.stringify(value)} would trust every hop, so any client could choose its address`);
    if (/^[0-9]+$/.test(only)) {
      const hops = Number(only);
      if (hops >= 1 && hops <= 32) return hops;
      throw refuse(`must be a hop count from 1 to 32, got ${JSON.stringify(value)}`);
    }
  }
  for (const item of items) {
    const [address, prefix, extra] = item.split('/');
    const family = isIP(address ?? '');
    const bits = family === 4 ? 32 : 128;
    if (!family || extra !== undefined || (prefix !== undefined && !/^[0-9]{1,3}$/.test(prefix)) || Number(prefix ?? bits) > bits) {
      throw refuse(`has ${JSON.stringify(item)}, which is neither an IP address nor a CIDR range`);
    }
    if (prefix !== undefined && Number(prefix) === 0) throw refuse(`has ${JSON.stringify(item)}, which trusts every address`);
  }
  return items;
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

function optionalPath(value: unknown): string | null {
  return value === undefined ? null : resolve(String(value));
}

const DURATION_UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400 };

/** Seconds from a number of seconds (`3600`) or a duration with a unit (`90s`, `15m`, `6h`, `1d`). */
export function toDurationSeconds(name: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  const m = /^([0-9]{1,9})\s*([smhd]?)$/i.exec(String(value).trim());
  const seconds = m ? Number(m[1]) * DURATION_UNITS[(m[2] || 's').toLowerCase()]! : NaN;
  if (!Number.isInteger(seconds) || seconds < min || seconds > max) {
    throw new ConfigError(
      `${name} must be a number of seconds or a duration such as 90s, 15m, 6h or 1d, from ${min} s to ${max / 86_400} days, got ${JSON.stringify(value)}`,
    );
  }
  return seconds;
}

/** A bearer token for the metrics: long enough not to be guessed, printable, no spaces. */
function toMetricsToken(value: unknown): string | null {
  if (value === undefined) return null;
  const s = String(value);
  if (s.length < 16 || s.length > 512 || !/^[\x21-\x7e]+$/.test(s)) {
    throw new ConfigError('metricsToken must be 16 to 512 printable characters without spaces (e.g. openssl rand -hex 32)');
  }
  return s;
}

/** An http(s) base address without a trailing slash, or undefined when not set. */
function toBaseUrl(name: string, value: unknown): string | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  try {
    const u = new URL(String(value));
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('protocol');
    return u.toString().replace(/\/+$/, '');
  } catch {
    throw new ConfigError(`${name} must be an http(s) URL, got ${JSON.stringify(value)}`);
  }
}

function toSecret(name: string, value: unknown): string {
  if (typeof value !== 'string' || value.length < 32) {
    const variable = name === 'secrets.jwtSecret' ? 'SVC_JWT_SECRET' : 'SVC_ENCRYPTION_KEY';
    throw new ConfigError(
      `${name} is missing or shorter than 32 characters (in ${variable} or ${CONFIG_FILE}); run "svc init" on a fresh data folder, restore the file, or set ${variable} to the value every node shares`,
    );
  }
  return value;
}

/** A redis:// or rediss:// URL, or null when not set. The password never appears in the error. */
function toRedisUrl(value: unknown): string | null {
  if (value === undefined || value === null || value === '') return null;
  let url: URL;
  try {
    url = new URL(String(value));
  } catch {
    throw new ConfigError('redisUrl must be a redis://host:port URL (rediss:// for TLS)');
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:')
    throw new ConfigError(`redisUrl must be a redis:// or rediss:// URL (got a ${url.protocol}// one)`);
  if (!url.hostname) throw new ConfigError('redisUrl must name a host: redis://host:port');
  return String(value);
}

/**
 * A postgres:// URL naming a host and a database, as the config takes it (a ConfigError
 * naming `name`, the setting or option it came from, when it is not one). The password never
 * appears in the error.
 */
export function databaseUrlOf(value: string, name = 'databaseUrl'): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ConfigError(`${name} must be a postgres://user@host:port/database URL`);
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    const hint = name === 'databaseUrl' ? '; without it svc uses SQLite in the data folder' : '';
    throw new ConfigError(`${name} must be a postgres:// URL (got a ${url.protocol}// one)${hint}`);
  }
  if (!url.hostname || url.pathname.length < 2) throw new ConfigError(`${name} must name a host and a database: postgres://user@host:port/database`);
  return value;
}

/** A postgres:// URL, or null when not set. */
function toDatabaseUrl(value: unknown): string | null {
  if (value === undefined || value === null || value === '') return null;
  return databaseUrlOf(String(value));
}

/** A database URL for messages and logs: the password replaced by ***. */
export function redactDatabaseUrl(value: string): string {
  try {
    const url = new URL(value);
    if (url.password) url.password = '***';
    return url.toString();
  } catch {
    return 'postgres://***';
  }
}

/**
 * Engine threads by default: one per core but one, which the main thread keeps (HTTP, webhook
 * intake and its commits, the claims that feed the threads). On 2 cores one thread spent less
 * CPU per run and per webhook than two, at about 25 MB less memory, and drained only a little
 * slower (README, Execution).
 */
function defaultWorkers(): number {
  return Math.max(1, availableParallelism() - 1);
}

export function loadConfig(flags: ConfigFlags = {}, env: NodeJS.ProcessEnv = process.env): Config {
  const dataDir = resolveDataDir(flags.dataDir, env);
  if (!isInitialised(dataDir)) throw new NotInitialisedError(dataDir);
  const file = readFileConfig(dataDir);
  const fileStripe = (file.stripe ?? {}) as Record<string, unknown> & { prices?: Record<string, unknown> };
  const fileBackup = (file.backup ?? {}) as Record<string, unknown>;

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
    databaseUrl: toDatabaseUrl(pick(flags.databaseUrl, env.SVC_DATABASE_URL, file.databaseUrl)),
    redisUrl: toRedisUrl(pick(flags.redisUrl, env.SVC_REDIS_URL, file.redisUrl)),
    redisPrefix: ((v) => {
      const prefix = v === undefined ? 'svc:' : String(v);
      if (!/^[\x21-\x7e]{1,64}$/.test(prefix)) throw new ConfigError('redisPrefix must be 1 to 64 printable ASCII characters without spaces');
      return prefix;
    })(pick(env.SVC_REDIS_PREFIX, file.redisPrefix)),
    host,
    port,
    publicUrl,
    sandboxUrl: toBaseUrl('sandboxUrl', pick(env.SVC_SANDBOX_URL, file.sandboxUrl)) ?? publicUrl,
    publicUrlConfigured: publicUrlRaw !== undefined,
    sandboxUrlConfigured: pick(env.SVC_SANDBOX_URL, file.sandboxUrl) !== undefined,
    logLevel: toEnum('logLevel', pick(flags.logLevel, env.SVC_LOG_LEVEL, file.logLevel), LOG_LEVELS, 'info'),
    dbSynchronous: toEnum('dbSynchronous', pick(env.SVC_DB_SYNCHRONOUS, file.dbSynchronous), ['FULL', 'NORMAL'] as const, 'FULL'),
    defaultPhoneRegion: toRegion(pick(env.SVC_DEFAULT_PHONE_REGION, file.defaultPhoneRegion)),
    trustProxy: toTrustProxy(pick(env.SVC_TRUST_PROXY, file.trustProxy)),
    bodyLimit: toInt('bodyLimit', pick(env.SVC_BODY_LIMIT, file.bodyLimit), 1024 * 1024, 1024, 64 * 1024 * 1024),
    bodyTimeoutSeconds: toInt('bodyTimeoutSeconds', pick(env.SVC_BODY_TIMEOUT_SECONDS, file.bodyTimeoutSeconds), 30, 1, 3600),
    webhookRateLimit: toInt('webhookRateLimit', pick(env.SVC_WEBHOOK_RATE_LIMIT, file.webhookRateLimit), 120, 1, 1_000_000),
    webhookBodyLimit: toInt('webhookBodyLimit', pick(env.SVC_WEBHOOK_BODY_LIMIT, file.webhookBodyLimit), 1024 * 1024, 1024, 64 * 1024 * 1024),
    importMaxBytes: toInt('importMaxBytes', pick(env.SVC_IMPORT_MAX_BYTES, file.importMaxBytes), 1024 * 1024 * 1024, 1024, 64 * 1024 * 1024 * 1024),
    importSyncBytes: toInt('importSyncBytes', pick(env.SVC_IMPORT_SYNC_BYTES, file.importSyncBytes), 1024 * 1024, 0, 64 * 1024 * 1024),
    importConcurrency: toInt('importConcurrency', pick(env.SVC_IMPORT_CONCURRENCY, file.importConcurrency), 4, 1, 100),
    exportConcurrency: toInt('exportConcurrency', pick(env.SVC_EXPORT_CONCURRENCY, file.exportConcurrency), 4, 1, 100),
    webhookEventRetentionDays: toInt('webhookEventRetentionDays', pick(env.SVC_WEBHOOK_EVENT_RETENTION_DAYS, file.webhookEventRetentionDays), 7, 1, 3650),
    runRetentionDays: toInt('runRetentionDays', pick(env.SVC_RUN_RETENTION_DAYS, file.runRetentionDays), 90, 0, 36500),
    deliveryRetentionDays: toInt('deliveryRetentionDays', pick(env.SVC_DELIVERY_RETENTION_DAYS, file.deliveryRetentionDays), 90, 0, 36500),
    auditRetentionDays: toInt('auditRetentionDays', pick(env.SVC_AUDIT_RETENTION_DAYS, file.auditRetentionDays), 400, 0, 36500),
    sessionRetentionDays: toInt('sessionRetentionDays', pick(env.SVC_SESSION_RETENTION_DAYS, file.sessionRetentionDays), 7, 0, 3650),
    engine: toBool('engine', pick(env.SVC_ENGINE, file.engine), true),
    workers: toInt('workers', pick(env.SVC_WORKERS, file.workers), defaultWorkers(), 1, 64),
    httpAllowPrivate: toBool('httpAllowPrivate', pick(env.SVC_HTTP_ALLOW_PRIVATE, file.httpAllowPrivate), false),
    httpAllowedHosts: toList(pick(env.SVC_HTTP_ALLOWED_HOSTS, file.httpAllowedHosts)),
    httpTimeoutMs: toInt('httpTimeoutMs', pick(env.SVC_HTTP_TIMEOUT_MS, file.httpTimeoutMs), 10_000, 100, 300_000),
    httpMaxResponseBytes: toInt('httpMaxResponseBytes', pick(env.SVC_HTTP_MAX_RESPONSE_BYTES, file.httpMaxResponseBytes), 1024 * 1024, 1024, 64 * 1024 * 1024),
    outboundPerHostConcurrency: toInt(
      'outboundPerHostConcurrency',
      pick(env.SVC_OUTBOUND_PER_HOST_CONCURRENCY, file.outboundPerHostConcurrency),
      256,
      1,
      10_000,
    ),
    runLeaseSeconds: toInt('runLeaseSeconds', pick(env.SVC_RUN_LEASE_SECONDS, file.runLeaseSeconds), 30, 1, 3600),
    runConcurrency: toInt('runConcurrency', pick(env.SVC_RUN_CONCURRENCY, file.runConcurrency), 1000, 1, 100_000),
    heapGrowthPercent: toInt('heapGrowthPercent', pick(env.SVC_HEAP_GROWTH, file.heapGrowthPercent), 50, 0, 1000),
    workspaceConcurrency: toInt('workspaceConcurrency', pick(env.SVC_WORKSPACE_CONCURRENCY, file.workspaceConcurrency), 500, 1, 100_000),
    shutdownGraceSeconds: toInt('shutdownGraceSeconds', pick(env.SVC_SHUTDOWN_GRACE, file.shutdownGraceSeconds), 10, 0, 3600),
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
    sessionMaxDays: toInt('sessionMaxDays', pick(env.SVC_SESSION_MAX_DAYS, file.sessionMaxDays), 30, 1, 365),
    deliveryMaxAttempts: toInt('deliveryMaxAttempts', pick(env.SVC_DELIVERY_MAX_ATTEMPTS, file.deliveryMaxAttempts), 5, 1, 50),
    deliveryRetryBaseMs: toInt('deliveryRetryBaseMs', pick(env.SVC_DELIVERY_RETRY_BASE_MS, file.deliveryRetryBaseMs), 1000, 1, 3_600_000),
    loginRateLimit: toInt('loginRateLimit', pick(env.SVC_LOGIN_RATE_LIMIT, file.loginRateLimit), 10, 1, 100_000),
    renderRateLimit: toInt('renderRateLimit', pick(env.SVC_RENDER_RATE_LIMIT, file.renderRateLimit), 60, 1, 1_000_000),
    runStartRateLimit: toInt('runStartRateLimit', pick(env.SVC_RUN_START_RATE_LIMIT, file.runStartRateLimit), 600, 1, 1_000_000),
    backup: {
      dir: optionalPath(pick(env.SVC_BACKUP_DIR, fileBackup.dir)),
      intervalSeconds: toDurationSeconds('backup.interval', pick(env.SVC_BACKUP_INTERVAL, fileBackup.interval), 86_400, 1, 30 * 86_400),
      keep: toInt('backup.keep', pick(env.SVC_BACKUP_KEEP, fileBackup.keep), 7, 1, 1000),
    },
    metricsToken: toMetricsToken(pick(env.SVC_METRICS_TOKEN, file.metricsToken)),
    metricsPort: ((v) => (v === undefined ? null : toInt('metricsPort', v, 0, 1, 65535)))(pick(flags.metricsPort, env.SVC_METRICS_PORT, file.metricsPort)),
    consoleDir: optionalPath(pick(env.SVC_CONSOLE_DIR, file.consoleDir)),
    logFormat: toEnum('logFormat', pick(env.SVC_LOG_FORMAT, file.logFormat), ['auto', 'pretty', 'json'] as const, 'auto'),
    secrets: {
      jwtSecret: toSecret('secrets.jwtSecret', pick(env.SVC_JWT_SECRET, file.secrets?.jwtSecret)),
      encryptionKey: toSecret('secrets.encryptionKey', pick(env.SVC_ENCRYPTION_KEY, file.secrets?.encryptionKey)),
    },
  };
  return deepFreeze(config);
}

function deepFreeze<T extends object>(o: T): T {
  for (const v of Object.values(o)) if (v && typeof v === 'object') deepFreeze(v as object);
  return Object.freeze(o);
}
