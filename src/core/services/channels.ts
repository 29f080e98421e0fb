import { isIP } from 'node:net';
import { eq } from 'drizzle-orm';
import { recordAudit } from '../audit.js';
import { inWorkspace, nowIso, withTransaction, type WorkspaceContext } from '../context.js';
import type { Config } from '../config.js';
import type { Db } from '../db/connection.js';
import { CHANNELS, channelSettings, PROVIDERS, type Channel, type ProviderName } from '../db/schema.js';
import { ValidationError, type FieldError } from '../errors.js';
import { decryptSecret, encryptSecret } from '../secrets.js';
import { normalizeEmail } from '../validation.js';
import { isSandboxWorkspace } from './sandbox.js';
import { literalRefusal, outboundPolicyFrom, portOf } from '../../engine/outbound.js';

/**
 * Which provider delivers each channel of a workspace, with its settings and (encrypted)
 * credentials. A channel without a row uses the built-in outbox, so a fresh workspace can
 * send without any outside service.
 */

export interface SmtpSettings {
  host: string;
  port: number;
  secure: boolean;
  from: string;
  requireTLS: boolean;
}
export interface SmtpCredentials {
  user?: string;
  pass?: string;
}
export interface TwilioSettings {
  baseUrl: string;
  accountSid: string;
  from: string;
}
export interface TwilioCredentials {
  authToken: string;
}
export interface WhatsAppSettings {
  baseUrl: string;
  phoneNumberId: string;
}
export interface WhatsAppCredentials {
  accessToken: string;
}

export const DEFAULT_TWILIO_BASE_URL = 'https://api.twilio.com';
export const DEFAULT_WHATSAPP_BASE_URL = 'https://graph.facebook.com/v20.0';

export interface ChannelView {
  provider: ProviderName;
  settings: Record<string, unknown>;
  hasCredentials: boolean;
}

export type ChannelsView = Record<Channel, ChannelView>;

export interface ChannelInput {
  provider: ProviderName;
  settings?: Record<string, unknown> | undefined;
  credentials?: Record<string, unknown> | undefined;
}

export type ChannelsInput = Partial<Record<Channel, ChannelInput>>;

/** What the engine needs to send on a channel, credentials decrypted. */
export interface ResolvedChannel {
  provider: ProviderName;
  settings: Record<string, unknown>;
  credentials: Record<string, unknown>;
}

/** The stored credentials of a channel cannot be read (the encryption key changed). */
export class ChannelUnusableError extends Error {
  constructor(
    readonly provider: ProviderName,
    message: string,
  ) {
    super(message);
    this.name = 'ChannelUnusableError';
  }
}

const PROVIDER_CHANNEL: Record<Exclude<ProviderName, 'outbox'>, Channel> = { smtp: 'EMAIL', twilio: 'SMS', whatsapp: 'WHATSAPP' };
const MAX_TEXT = 1000;

const OUTBOX_VIEW: ChannelView = { provider: 'outbox', settings: {}, hasCredentials: false };

export async function getChannels(ctx: WorkspaceContext): Promise<ChannelsView> {
  const rows = await ctx.db.select().from(channelSettings).where(inWorkspace(ctx, channelSettings.workspaceId));
  const view = Object.fromEntries(CHANNELS.map((c) => [c, { ...OUTBOX_VIEW, settings: {} }])) as ChannelsView;
  for (const row of rows) view[row.channel] = { provider: row.provider, settings: row.settings, hasCredentials: row.credentials !== null };
  return view;
}

/**
 * Checks one object's fields against a provider's field list: unknown fields are refused
 * (a typo such as `hots` must not silently fall back to a default).
 */
class FieldChecker {
  readonly errors: FieldError[] = [];
  readonly out: Record<string, unknown> = {};

  constructor(
    private readonly base: string,
    private readonly input: Record<string, unknown>,
    known: string[],
  ) {
    for (const key of Object.keys(input)) if (!known.includes(key)) this.fail(key, 'is not a known field');
  }

  fail(field: string, message: string): void {
    this.errors.push({ path: `${this.base}/${field}`, message });
  }

  text(field: string, opts: { required: boolean; pattern?: RegExp | ((s: string) => boolean); hint?: string; max?: number }): void {
    const value = this.input[field];
    if (value === undefined) {
      if (opts.required) this.fail(field, 'is required');
      return;
    }
    if (typeof value !== 'string' || !value.trim()) return this.fail(field, 'must be a non-empty string');
    const s = value.trim();
    if (s.length > (opts.max ?? MAX_TEXT)) return this.fail(field, `must be at most ${opts.max ?? MAX_TEXT} characters`);
    const ok = !opts.pattern || (typeof opts.pattern === 'function' ? opts.pattern(s) : opts.pattern.test(s));
    if (!ok) return this.fail(field, opts.hint ?? 'is invalid');
    this.out[field] = s;
  }

  secret(field: string, required: boolean): void {
    const value = this.input[field];
    if (value === undefined) {
      if (required) this.fail(field, 'is required');
      return;
    }
    if (typeof value !== 'string' || value.length < 1 || value.length > 4096) return this.fail(field, 'must be a string of 1 to 4096 characters');
    this.out[field] = value;
  }

  boolean(field: string, fallback: boolean): void {
    const value = this.input[field];
    if (value === undefined) this.out[field] = fallback;
    else if (typeof value !== 'boolean') this.fail(field, 'must be boolean');
    else this.out[field] = value;
  }

  integer(field: string, min: number, max: number): void {
    const value = this.input[field];
    if (value === undefined) return this.fail(field, 'is required');
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max)
      return this.fail(field, `must be an integer from ${min} to ${max}`);
    this.out[field] = value;
  }

  email(field: string): void {
    const value = this.input[field];
    if (value === undefined) return this.fail(field, 'is required');
    const email = typeof value === 'string' ? normalizeEmail(value) : undefined;
    if (!email) return this.fail(field, 'must be an email address');
    this.out[field] = email;
  }

  /** An http(s) base URL without credentials, query or fragment; stored without a trailing slash. */
  baseUrl(field: string, fallback: string): void {
    const value = this.input[field];
    if (value === undefined) {
      this.out[field] = fallback;
      return;
    }
    let url: URL | undefined;
    try {
      url = typeof value === 'string' && value.length <= 2048 ? new URL(value.trim()) : undefined;
    } catch {
      url = undefined;
    }
    if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) return this.fail(field, 'must be an http(s) URL');
    if (url.username || url.password) return this.fail(field, 'must not contain credentials; put them in credentials');
    if (url.search || url.hash) return this.fail(field, 'must not have a query string or fragment');
    this.out[field] = url.toString().replace(/\/+$/, '');
  }
}

const HOSTNAME_RE = /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;
/** Used in a URL path segment, so only characters that need no escaping. */
const PATH_ID_RE = /^[A-Za-z0-9_-]{1,128}$/;

const settingFields: Record<ProviderName, string[]> = {
  outbox: [],
  smtp: ['host', 'port', 'secure', 'from', 'requireTLS'],
  twilio: ['baseUrl', 'accountSid', 'from'],
  whatsapp: ['baseUrl', 'phoneNumberId'],
};

/**
 * The settings that decide where (and how) the credentials are sent. Stored credentials
 * are kept only while all of these stay as they were: otherwise an ADMIN key could point
 * the provider at its own server and receive the SMTP password or API token.
 */
const destinationFields: Record<ProviderName, string[]> = {
  outbox: [],
  smtp: ['host', 'port', 'secure', 'requireTLS'],
  twilio: ['baseUrl'],
  whatsapp: ['baseUrl'],
};

function sameDestination(provider: ProviderName, before: Record<string, unknown>, next: Record<string, unknown>): boolean {
  const norm = (v: unknown) => (typeof v === 'string' ? v.toLowerCase() : v);
  return destinationFields[provider].every((field) => norm(before[field]) === norm(next[field]));
}

const credentialFields: Record<ProviderName, string[]> = {
  outbox: [],
  smtp: ['user', 'pass'],
  twilio: ['authToken'],
  whatsapp: ['accessToken'],
};

interface CheckedChannel {
  settings: Record<string, unknown>;
  /** Undefined when the input gave none (keep the stored ones if allowed). */
  credentials: Record<string, unknown> | undefined;
  credentialsRequired: boolean;
}

function checkChannel(channel: Channel, input: ChannelInput, errors: FieldError[]): CheckedChannel | undefined {
  const base = `/${channel}`;
  const provider = input.provider;
  if (!(PROVIDERS as readonly string[]).includes(provider)) {
    errors.push({ path: `${base}/provider`, message: `must be one of ${PROVIDERS.join(', ')}` });
    return undefined;
  }
  if (provider !== 'outbox' && PROVIDER_CHANNEL[provider] !== channel) {
    errors.push({ path: `${base}/provider`, message: `${provider} delivers ${PROVIDER_CHANNEL[provider]} only` });
    return undefined;
  }
  const s = new FieldChecker(`${base}/settings`, input.settings ?? {}, settingFields[provider]);
  const c = input.credentials === undefined ? undefined : new FieldChecker(`${base}/credentials`, input.credentials, credentialFields[provider]);
  let credentialsRequired = false;
  switch (provider) {
    case 'outbox':
      break;
    case 'smtp':
      s.text('host', {
        required: true,
        pattern: (h) => HOSTNAME_RE.test(h) || isIP(h) !== 0,
        hint: 'must be a host name or IP address (IPv6 without brackets)',
        max: 253,
      });
      s.integer('port', 1, 65535);
      s.boolean('secure', false);
      s.email('from');
      s.boolean('requireTLS', false);
      c?.secret('user', false);
      c?.secret('pass', false);
      break;
    case 'twilio':
      s.baseUrl('baseUrl', DEFAULT_TWILIO_BASE_URL);
      s.text('accountSid', { required: true, pattern: PATH_ID_RE, hint: 'must be letters, digits, _ or -' });
      s.text('from', { required: true, max: 64 });
      c?.secret('authToken', true);
      credentialsRequired = true;
      break;
    case 'whatsapp':
      s.baseUrl('baseUrl', DEFAULT_WHATSAPP_BASE_URL);
      s.text('phoneNumberId', { required: true, pattern: PATH_ID_RE, hint: 'must be letters, digits, _ or -' });
      c?.secret('accessToken', true);
      credentialsRequired = true;
      break;
  }
  errors.push(...s.errors, ...(c?.errors ?? []));
  return { settings: s.out, credentials: c?.out, credentialsRequired };
}

/**
 * A destination the sends would be refused (a literal private, loopback or reserved address
 * not allowed by SVC_HTTP_ALLOW_PRIVATE / SVC_HTTP_ALLOWED_HOSTS) is refused as it is saved,
 * at its field, rather than saved and failing every send. Names are checked when resolved,
 * at send time, as before.
 */
function checkDestination(config: Config, channel: Channel, provider: ProviderName, settings: Record<string, unknown>, errors: FieldError[]): void {
  let host: string;
  let port: number | string;
  let field: string;
  if (provider === 'smtp' && typeof settings.host === 'string') {
    [host, port, field] = [hostAsUrlsRead(settings.host), Number(settings.port), 'host'];
  } else if ((provider === 'twilio' || provider === 'whatsapp') && typeof settings.baseUrl === 'string') {
    const url = new URL(settings.baseUrl);
    [host, port, field] = [url.hostname, portOf(url), 'baseUrl'];
  } else return;
  const refused = literalRefusal(host, port, outboundPolicyFrom(config));
  if (refused) errors.push({ path: `/${channel}/settings/${field}`, message: refused });
}

/**
 * A host as a URL parser (and the system's resolver) reads it: `0x7f000001`, `2130706433`,
 * `0177.0.0.1` and `127.1` are all 127.0.0.1, so they are checked as that address.
 */
function hostAsUrlsRead(host: string): string {
  try {
    return new URL(`http://${host.includes(':') && !host.startsWith('[') ? `[${host}]` : host}/`).hostname;
  } catch {
    return host;
  }
}

/**
 * Replaces the settings of the channels present in the input; the others are untouched.
 * Credentials left out are kept when the provider and its destination (host, port and TLS
 * mode, or base URL) stay the same, so an admin can change a sender address without
 * retyping a password; a new destination needs the credentials again (422 with the
 * pointer `/<CHANNEL>/credentials`). Credentials are stored encrypted and never returned.
 */
export function updateChannels(ctx: WorkspaceContext, input: ChannelsInput): Promise<ChannelsView> {
  const errors: FieldError[] = [];
  const checked = new Map<Channel, { provider: ProviderName } & CheckedChannel>();
  for (const channel of CHANNELS) {
    const given = input[channel];
    if (!given) continue;
    const result = checkChannel(channel, given, errors);
    if (result) {
      checked.set(channel, { provider: given.provider, ...result });
      checkDestination(ctx.config, channel, given.provider, result.settings, errors);
    }
  }
  if (errors.length) throw new ValidationError('validation_failed', 'The channel settings are invalid', errors);
  if (!checked.size) return getChannels(ctx);

  return withTransaction(ctx, async (tx) => {
    const changed: Record<string, ProviderName> = {};
    for (const [channel, next] of checked) {
      const [before] = await tx.db
        .select({ provider: channelSettings.provider, settings: channelSettings.settings, credentials: channelSettings.credentials })
        .from(channelSettings)
        .where(inWorkspace(tx, channelSettings.workspaceId, eq(channelSettings.channel, channel)));
      let credentials: string | null = null;
      if (next.credentials !== undefined) {
        credentials = Object.keys(next.credentials).length ? encryptSecret(ctx.config, JSON.stringify(next.credentials)) : null;
      } else if (before && before.provider === next.provider && before.credentials !== null) {
        if (!sameDestination(next.provider, before.settings, next.settings)) {
          const fields = destinationFields[next.provider].join(', ');
          throw new ValidationError('validation_failed', 'The channel settings are invalid', [
            { path: `/${channel}/credentials`, message: `are required again when the destination (${fields}) changes` },
          ]);
        }
        credentials = before.credentials;
      }
      if (next.credentialsRequired && credentials === null) {
        throw new ValidationError('validation_failed', 'The channel settings are invalid', [
          { path: `/${channel}/credentials`, message: `are required for ${next.provider}` },
        ]);
      }
      const values = { provider: next.provider, settings: next.settings, credentials, updatedAt: nowIso() };
      await tx.db
        .insert(channelSettings)
        .values({ workspaceId: ctx.workspaceId, channel, ...values })
        .onConflictDoUpdate({ target: [channelSettings.workspaceId, channelSettings.channel], set: values });
      changed[channel] = next.provider;
    }
    await recordAudit(tx, {
      workspaceId: ctx.workspaceId,
      action: 'settings.channels_updated',
      target: { type: 'workspace', id: ctx.workspaceId },
      metadata: { channels: changed },
    });
    return getChannels(tx);
  });
}

/**
 * The provider, settings and decrypted credentials for one channel of a workspace, for
 * the delivery engine. Throws ChannelUnusableError when stored credentials cannot be read.
 */
export async function resolveChannel(db: Db, config: Pick<Config, 'secrets'>, workspaceId: number, channel: Channel): Promise<ResolvedChannel> {
  // Nothing leaves the machine from a sandbox: whatever its settings say, every channel is the outbox.
  if (await isSandboxWorkspace(db, workspaceId)) return { provider: 'outbox', settings: {}, credentials: {} };
  const [row] = await db
    .select()
    .from(channelSettings)
    .where(inWorkspace({ workspaceId }, channelSettings.workspaceId, eq(channelSettings.channel, channel)));
  if (!row) return { provider: 'outbox', settings: {}, credentials: {} };
  let credentials: Record<string, unknown> = {};
  if (row.credentials !== null) {
    try {
      credentials = JSON.parse(decryptSecret(config, row.credentials)) as Record<string, unknown>;
    } catch {
      throw new ChannelUnusableError(
        row.provider,
        `The stored ${channel} credentials cannot be decrypted (was the encryption key changed?); set them again in the channel settings`,
      );
    }
  }
  return { provider: row.provider, settings: row.settings, credentials };
}
