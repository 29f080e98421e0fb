import { eq, sql } from 'drizzle-orm';
import { recordAudit } from '../audit.js';
import { nowIso, selectPage, withTransaction, type PageRequest, type SystemContext, type WorkspaceContext } from '../context.js';
import type { Config } from '../config.js';
import type { Db } from '../db/connection.js';
import { execute, tablesWithWorkspaceId } from '../db/dialect.js';
import { sandboxRequests, workspaces, type Plan } from '../db/schema.js';
import { AppError, NotFoundError } from '../errors.js';
import type { Page } from '../pagination.js';
import { MASKED, maskHeaderValues, maskUrlPath } from '../steps.js';

/**
 * The sandbox: each live workspace may have one twin workspace (`workspaces.sandbox_of`)
 * with its own contacts, templates, workflows, automations, runs and `svc_test_` keys, on
 * the same plan as its live twin. Members of the live workspace have the same role in it.
 * Nothing leaves the machine from a sandbox: every channel is the outbox and http_request
 * steps are recorded (sandbox_requests), not sent (see the engine's executor and
 * channels.resolveChannel).
 */

export interface SandboxView {
  id: number;
  liveWorkspaceId: number;
  name: string;
  plan: Plan;
  /** Where the sandbox is reached and its webhook URLs are minted (SVC_SANDBOX_URL). */
  baseUrl: string;
  createdAt: string;
}

/**
 * Tables of a workspace's data that a reset keeps: the workspace row, its API keys (so a
 * CI job's `svc_test_` key keeps working across resets), its sessions (users switched into
 * the sandbox stay there) and its audit trail (a reset is history, not undone by itself).
 */
const KEPT_ON_RESET = new Set(['workspaces', 'api_keys', 'sessions', 'audit_logs']);

const SUFFIX = ' (sandbox)';

function view(row: typeof workspaces.$inferSelect, config: Pick<Config, 'sandboxUrl'>): SandboxView {
  return { id: row.id, liveWorkspaceId: row.sandboxOf!, name: row.name, plan: row.plan, baseUrl: config.sandboxUrl, createdAt: row.createdAt };
}

/** The live workspace a sandbox belongs to, or null when the workspace is live (or unknown). */
export async function sandboxOf(db: Db, workspaceId: number): Promise<number | null> {
  const [row] = await db.select({ sandboxOf: workspaces.sandboxOf }).from(workspaces).where(eq(workspaces.id, workspaceId));
  return row?.sandboxOf ?? null;
}

export async function isSandboxWorkspace(db: Db, workspaceId: number): Promise<boolean> {
  return (await sandboxOf(db, workspaceId)) !== null;
}

/**
 * A memoised isSandboxWorkspace for hot paths (the inbound webhook): whether a workspace is a
 * sandbox never changes, and ids are never reused (AUTOINCREMENT).
 */
export function sandboxLookup(db: Db): (workspaceId: number) => Promise<boolean> {
  const known = new Map<number, boolean>();
  return async (workspaceId) => {
    let sandbox = known.get(workspaceId);
    if (sandbox === undefined) {
      if (known.size > 100_000) known.clear();
      sandbox = await isSandboxWorkspace(db, workspaceId);
      known.set(workspaceId, sandbox);
    }
    return sandbox;
  };
}

/** The base address of a workspace: SVC_SANDBOX_URL for a sandbox, SVC_PUBLIC_URL otherwise. */
export async function baseUrlOf(ctx: { db: Db; config: Pick<Config, 'publicUrl' | 'sandboxUrl'>; workspaceId: number }): Promise<string> {
  return (await isSandboxWorkspace(ctx.db, ctx.workspaceId)) ? ctx.config.sandboxUrl : ctx.config.publicUrl;
}

/** host[:port] of a base address as a Host header names it (no default port). */
function hostOf(url: string): string {
  return new URL(url).host.toLowerCase();
}

/** True when the sandbox has an address of its own (SVC_SANDBOX_URL names another host than SVC_PUBLIC_URL). */
export function hasSandboxAddress(config: Pick<Config, 'publicUrl' | 'sandboxUrl'>): boolean {
  return hostOf(config.sandboxUrl) !== hostOf(config.publicUrl);
}

/**
 * A test of a request's Host: does it name the sandbox address? Never true when the sandbox
 * has no address of its own. Built once per configuration (requests call it on hot paths).
 */
export function sandboxHostMatcher(config: Pick<Config, 'publicUrl' | 'sandboxUrl'>): (host: string | undefined) => boolean {
  if (!hasSandboxAddress(config)) return () => false;
  const expected = hostOf(config.sandboxUrl);
  // A Host header may spell out the default port that URL.host leaves out.
  const withDefaultPort = `${expected}${new URL(config.sandboxUrl).protocol === 'https:' ? ':443' : ':80'}`;
  // When the two addresses differ by name (sandbox.example.com, api.example.com), the name
  // alone tells them apart: a proxy that drops the port, or a name with its final dot, still
  // reaches the sandbox's side. When they differ only by port, the port must match too.
  const name = new URL(config.sandboxUrl).hostname.toLowerCase();
  const byName = name !== new URL(config.publicUrl).hostname.toLowerCase();
  return (host) => {
    if (!host) return false;
    const named = host.trim().toLowerCase();
    if (named === expected || named === withDefaultPort) return true;
    return byName && hostnameOf(named) === name;
  };
}

/** The name of a (lower-cased) Host header: without its port and a final dot. */
function hostnameOf(host: string): string {
  return host.replace(/:\d*$/, '').replace(/\.$/, '');
}

export async function getSandbox(ctx: SystemContext, workspaceId: number): Promise<SandboxView> {
  const liveId = (await sandboxOf(ctx.db, workspaceId)) ?? workspaceId;
  const [row] = await ctx.db.select().from(workspaces).where(eq(workspaces.sandboxOf, liveId)).limit(1);
  if (!row)
    throw new NotFoundError('sandbox_not_found', `Workspace ${liveId} has no sandbox yet; create it with POST /sandbox or "svc workspace sandbox ${liveId}"`);
  return view(row, ctx.config);
}

export interface SandboxResult {
  sandbox: SandboxView;
  created: boolean;
  reset: boolean;
}

/**
 * Creates the sandbox of a workspace, or answers the existing one; with `reset`, deletes
 * every piece of the sandbox's data (contacts, templates, workflows and their webhook URLs,
 * automations, runs, deliveries, recorded requests, channel settings...) and keeps its id,
 * keys and sessions. Called with a sandbox's own id, it acts on that sandbox.
 */
export async function ensureSandbox(ctx: SystemContext, workspaceId: number, opts: { reset?: boolean } = {}): Promise<SandboxResult> {
  return withTransaction(ctx, async (tx) => {
    const [given] = await tx.db.select().from(workspaces).where(eq(workspaces.id, workspaceId));
    if (!given) throw new NotFoundError('workspace_not_found', `No workspace with id ${workspaceId}`);
    const live = given.sandboxOf === null ? given : (await tx.db.select().from(workspaces).where(eq(workspaces.id, given.sandboxOf)))[0]!;
    const [existing] = await tx.db.select().from(workspaces).where(eq(workspaces.sandboxOf, live.id)).limit(1);
    if (!existing) {
      const name = `${live.name.slice(0, 100 - SUFFIX.length)}${SUFFIX}`;
      const [row] = await tx.db.insert(workspaces).values({ name, plan: live.plan, sandboxOf: live.id }).returning();
      if (!row) throw new Error('the insert returned no row');
      for (const id of [live.id, row.id]) {
        await recordAudit(tx, {
          workspaceId: id,
          action: 'sandbox.created',
          target: { type: 'workspace', id: row.id },
          metadata: { liveWorkspaceId: live.id },
        });
      }
      return { sandbox: view(row, tx.config), created: true, reset: false };
    }
    if (!opts.reset) return { sandbox: view(existing, tx.config), created: false, reset: false };
    const deleted = await clearWorkspaceData(tx, existing.id);
    await tx.db.update(workspaces).set({ plan: live.plan, updatedAt: nowIso() }).where(eq(workspaces.id, existing.id));
    for (const id of [live.id, existing.id]) {
      await recordAudit(tx, { workspaceId: id, action: 'sandbox.reset', target: { type: 'workspace', id: existing.id }, metadata: { deleted } });
    }
    return { sandbox: view({ ...existing, plan: live.plan }, tx.config), created: false, reset: true };
  });
}

/**
 * Deletes a workspace's rows from every table that has a workspace_id, except the kept
 * ones. Found from the schema itself, so a table added later is cleared too. Two passes:
 * the count triggers of the first (contacts, tags, runs) may touch the counter tables again.
 * Answers the number of rows deleted per table (first pass).
 */
async function clearWorkspaceData(tx: Pick<SystemContext, 'db' | 'store'>, workspaceId: number): Promise<Record<string, number>> {
  const tables = (await tablesWithWorkspaceId(tx.store, tx.db)).filter((name) => !KEPT_ON_RESET.has(name));
  const deleted: Record<string, number> = {};
  for (let pass = 0; pass < 2; pass++) {
    for (const name of tables) {
      const changes = await execute(tx.store, tx.db, sql`DELETE FROM ${sql.identifier(name)} WHERE workspace_id = ${workspaceId}`);
      if (pass === 0 && changes > 0) deleted[name] = changes;
    }
  }
  return deleted;
}

/** Refuses what makes no sense in a sandbox (paying for a plan: the sandbox follows its live twin's). */
export async function assertNotSandbox(db: Db, workspaceId: number, what: string): Promise<void> {
  if (await isSandboxWorkspace(db, workspaceId))
    throw new AppError(422, 'not_in_sandbox', `${what} is not available in a sandbox; do it in the live workspace`);
}

export interface SandboxRequestView {
  id: number;
  runId: number | null;
  stepIndex: number | null;
  method: string;
  url: string;
  headers: Record<string, string>;
  body: string | null;
  createdAt: string;
}

/**
 * The http_request steps the workspace's sandbox runs recorded instead of sending, newest
 * first. `opts.masked`: the caller may only read (VIEWER), so header values and the URL past
 * its host are masked, as in the steps that sent them.
 */
export async function listSandboxRequests(ctx: WorkspaceContext, page: PageRequest, opts: { masked?: boolean } = {}): Promise<Page<SandboxRequestView>> {
  return selectPage(ctx, sandboxRequests, page, (r) => ({
    id: r.id,
    runId: r.runId,
    stepIndex: r.stepIndex,
    method: r.method,
    url: opts.masked ? maskUrlPath(r.url) : r.url,
    headers: opts.masked ? maskHeaderValues(r.headers) : r.headers,
    body: opts.masked && r.body ? MASKED : r.body,
    createdAt: r.createdAt,
  }));
}
