import { and, eq, isNull, lt, or } from 'drizzle-orm';
import { recordAudit } from '../audit.js';
import { inWorkspace, nowIso, selectPage, withTransaction, type PageRequest, type SystemContext, type WorkspaceContext } from '../context.js';
import { base62Fixed, crc32, randomBase62, sha256Hex } from '../crypto.js';
import { apiKeys, workspaces, type Plan, type Role } from '../db/schema.js';
import type { Store } from '../db/store.js';
import { ForbiddenError, NotFoundError, PlanError, ValidationError } from '../errors.js';
import type { Page } from '../pagination.js';
import { minimumPlanForKeyRole, planAtLeast, roleAtLeast } from '../roles.js';
import { getWorkspace } from './workspaces.js';

/**
 * Key format: svc_live_ + 32 base62 characters (about 190 bits from a CSPRNG) + a
 * 6-character CRC32 checksum, so a mistyped or made-up key is refused without a
 * database read. Only a SHA-256 of the key is stored: the key is high-entropy, so a
 * slow hash would add latency without adding safety.
 */
const KEY_RE = /^(svc_(?:live|test)_)([0-9A-Za-z]{32})([0-9A-Za-z]{6})$/;
const LIVE_PREFIX = 'svc_live_';
/** Keys of a sandbox workspace: the prefix says which side a key acts on. */
const TEST_PREFIX = 'svc_test_';

/** Whether a well-formed key is a sandbox (`svc_test_`) key. */
export function isTestKey(key: string): boolean {
  return key.startsWith(TEST_PREFIX);
}
const LAST_USED_WRITE_INTERVAL_MS = 60_000;

export interface ApiKeyView {
  id: number;
  name: string;
  role: Role;
  prefix: string;
  createdAt: string;
  lastUsedAt: string | null;
  revokedAt: string | null;
}

export interface MintedApiKey {
  id: number;
  name: string;
  role: Role;
  key: string;
  prefix: string;
  createdAt: string;
}

function view(row: typeof apiKeys.$inferSelect): ApiKeyView {
  return { id: row.id, name: row.name, role: row.role, prefix: row.prefix, createdAt: row.createdAt, lastUsedAt: row.lastUsedAt, revokedAt: row.revokedAt };
}

export function generateApiKey(prefix = LIVE_PREFIX): string {
  const body = prefix + randomBase62(32);
  return body + base62Fixed(crc32(body));
}

/** True when the string has the shape and checksum of a key this server could have minted. */
export function isWellFormedApiKey(key: string): boolean {
  const m = KEY_RE.exec(key);
  return !!m && base62Fixed(crc32(m[1]! + m[2]!)) === m[3];
}

export function looksLikeApiKey(token: string): boolean {
  return token.startsWith('svc_');
}

export function hashApiKey(key: string): string {
  return sha256Hex(key);
}

export async function mintApiKey(ctx: WorkspaceContext, input: { name: string; role: Role }, callerRole?: Role): Promise<MintedApiKey> {
  const name = input.name.trim();
  if (name.length < 1 || name.length > 100) {
    throw new ValidationError('validation_failed', 'The key name is 1 to 100 characters', [{ path: '/name', message: 'must be 1 to 100 characters' }]);
  }
  if (input.role === 'OWNER') throw new ValidationError('role_not_mintable', 'OWNER is granted only through a membership; it cannot be minted as an API key');
  if (callerRole && !roleAtLeast(callerRole, input.role)) throw new ForbiddenError(`A ${callerRole} cannot mint a ${input.role} key`);
  return withTransaction(ctx, async (tx) => {
    const workspace = await getWorkspace(tx, ctx.workspaceId);
    const needed = minimumPlanForKeyRole(input.role);
    if (!planAtLeast(workspace.plan, needed)) {
      throw new PlanError(`${input.role} keys need the ${needed} plan or above; this workspace is on ${workspace.plan}`);
    }
    const key = generateApiKey(workspace.sandboxOf === null ? LIVE_PREFIX : TEST_PREFIX);
    const prefix = key.slice(0, LIVE_PREFIX.length + 4);
    const [row] = await tx.db
      .insert(apiKeys)
      .values({ workspaceId: ctx.workspaceId, name, role: input.role, prefix, keyHash: hashApiKey(key) })
      .returning();
    if (!row) throw new Error('the insert returned no row');
    await recordAudit(tx, {
      workspaceId: ctx.workspaceId,
      action: 'api_key.created',
      target: { type: 'api_key', id: row.id },
      metadata: { name, role: input.role, prefix },
    });
    return { id: row.id, name: row.name, role: row.role, key, prefix, createdAt: row.createdAt };
  });
}

export function listApiKeys(ctx: WorkspaceContext, page: PageRequest): Promise<Page<ApiKeyView>> {
  return selectPage(ctx, apiKeys, page, view);
}

/** Revokes a key of this workspace; revoking twice keeps the first revocation time. */
export function revokeApiKey(ctx: WorkspaceContext, id: number): Promise<ApiKeyView> {
  return withTransaction(ctx, async (tx) => {
    const [row] = await tx.db
      .select()
      .from(apiKeys)
      .where(inWorkspace(tx, apiKeys.workspaceId, eq(apiKeys.id, id)));
    if (!row) throw new NotFoundError('api_key_not_found', `No API key with id ${id}`);
    if (row.revokedAt) return view(row);
    const [updated] = await tx.db.update(apiKeys).set({ revokedAt: nowIso() }).where(eq(apiKeys.id, id)).returning();
    if (!updated) throw new Error('the update returned no row');
    await recordAudit(tx, {
      workspaceId: ctx.workspaceId,
      action: 'api_key.revoked',
      target: { type: 'api_key', id },
      metadata: { name: row.name, prefix: row.prefix },
    });
    return view(updated);
  });
}

/** The workspace a key belongs to, for operator commands that name a key by id alone. */
export async function apiKeyWorkspaceId(ctx: Pick<SystemContext, 'db'>, id: number): Promise<number> {
  const [row] = await ctx.db.select({ workspaceId: apiKeys.workspaceId }).from(apiKeys).where(eq(apiKeys.id, id));
  if (!row) throw new NotFoundError('api_key_not_found', `No API key with id ${id}`);
  return row.workspaceId;
}

export interface ApiKeyIdentity {
  id: number;
  workspaceId: number;
  name: string;
  role: Role;
  plan: Plan;
  revoked: boolean;
  /** The key's workspace is a sandbox. */
  sandbox: boolean;
}

/**
 * Looks a presented key up by its hash, with its workspace's current plan. Read on every
 * request (an indexed read is microseconds), so a revocation or a plan change made by any
 * process sharing the database applies to the very next request.
 */
export async function findApiKey(ctx: Pick<SystemContext, 'db'>, key: string): Promise<ApiKeyIdentity | undefined> {
  const [row] = await ctx.db
    .select({
      id: apiKeys.id,
      workspaceId: apiKeys.workspaceId,
      name: apiKeys.name,
      role: apiKeys.role,
      revokedAt: apiKeys.revokedAt,
      plan: workspaces.plan,
      sandboxOf: workspaces.sandboxOf,
    })
    .from(apiKeys)
    .innerJoin(workspaces, eq(workspaces.id, apiKeys.workspaceId))
    .where(eq(apiKeys.keyHash, hashApiKey(key)));
  if (!row) return undefined;
  return {
    id: row.id,
    workspaceId: row.workspaceId,
    name: row.name,
    role: row.role,
    plan: row.plan,
    revoked: row.revokedAt !== null,
    sandbox: row.sandboxOf !== null,
  };
}

// Per store, so that several servers in one process (the tests) keep separate books.
const lastTouchedByStore = new WeakMap<Store, Map<number, number>>();

/**
 * Records use at most once a minute per key, so a busy key does not write on every
 * request: this process remembers its own last write, and the WHERE clause skips the
 * write when another process sharing the database made one within the minute.
 */
export async function touchApiKey(ctx: Pick<SystemContext, 'db' | 'store'>, id: number, now = new Date()): Promise<void> {
  let lastTouched = lastTouchedByStore.get(ctx.store);
  if (!lastTouched) {
    lastTouched = new Map();
    lastTouchedByStore.set(ctx.store, lastTouched);
  }
  const previous = lastTouched.get(id);
  if (previous !== undefined && now.getTime() - previous < LAST_USED_WRITE_INTERVAL_MS) return;
  lastTouched.set(id, now.getTime());
  const threshold = new Date(now.getTime() - LAST_USED_WRITE_INTERVAL_MS).toISOString();
  await withTransaction(ctx, async (tx) => {
    await tx.db
      .update(apiKeys)
      .set({ lastUsedAt: now.toISOString() })
      .where(and(eq(apiKeys.id, id), or(isNull(apiKeys.lastUsedAt), lt(apiKeys.lastUsedAt, threshold))));
  });
}
