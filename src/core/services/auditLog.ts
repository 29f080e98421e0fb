import { and, asc, desc, eq, gt, gte, lt, lte, or, sql, type SQL } from 'drizzle-orm';
import { inWorkspace, type PageRequest, type WorkspaceContext } from '../context.js';
import { auditLogs, type ActorType } from '../db/schema.js';
import { BadRequestError } from '../errors.js';
import { decodeCursor, readWithinBudget, type Page } from '../pagination.js';

export interface AuditLogView {
  id: number;
  at: string;
  actor: { type: ActorType; id: number | null; label: string | null };
  action: string;
  target: { type: string; id: number | string | null } | null;
  ip: string | null;
  metadata: Record<string, unknown>;
}

export interface AuditLogFilter extends PageRequest {
  /** Exact action (`contact.created`), or a prefix ending in `.*` (`contact.*`). */
  action?: string | undefined;
  actorType?: ActorType | undefined;
  /** ISO 8601 timestamps: `since` inclusive, `until` exclusive. */
  since?: string | undefined;
  until?: string | undefined;
}

function view(row: typeof auditLogs.$inferSelect): AuditLogView {
  const targetId = row.targetId === null ? null : /^[1-9][0-9]{0,15}$/.test(row.targetId) ? Number(row.targetId) : row.targetId;
  return {
    id: row.id,
    at: row.at,
    actor: { type: row.actorType, id: row.actorId, label: row.actorLabel },
    action: row.action,
    target: row.targetType === null ? null : { type: row.targetType, id: targetId },
    ip: row.ip,
    metadata: row.metadata ?? {},
  };
}

// A date, or a date and time with an explicit zone, so "since" never means local time.
const ISO_RE = /^\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:\d{2}))?$/;

/** Whether the date part names a day the month has: Date.parse takes 2026-02-30 for March 2. */
function realDate(value: string): boolean {
  const [y, m, d] = value.slice(0, 10).split('-').map(Number) as [number, number, number];
  return m >= 1 && m <= 12 && d >= 1 && d <= new Date(Date.UTC(y, m, 0)).getUTCDate();
}

/** Parses an ISO 8601 timestamp into the stored form (UTC, milliseconds), or answers 400. */
export function parseTimestamp(value: string, name: string): string {
  const ms = ISO_RE.test(value) && realDate(value) ? Date.parse(value) : NaN;
  if (Number.isNaN(ms)) throw new BadRequestError('invalid_query', `${name} must be an ISO 8601 timestamp such as 2026-01-31T12:00:00Z`);
  return new Date(ms).toISOString();
}

/**
 * The audit trail is listed newest first by time: by `at`, then by id among entries of one
 * millisecond. Every filter is then a seek on an index that ends with `at`: the actor type
 * and the action are equality columns in front of it, `since` and `until` a range on it, so
 * a page reads only the entries it answers with, however rare the filter's matches are among
 * a million (issue 9). An action prefix (`contact.*`) is the exact actions of the workspace
 * that start with it, found one index seek each, each read in order and merged.
 */
interface AuditKey {
  at: string;
  id: number;
}

type AuditRow = typeof auditLogs.$inferSelect;

/** A cursor names the last entry of the page: its time and id (base64url, version `a1`). */
function encodeAuditCursor(row: AuditKey): string {
  return Buffer.from(`a1:${row.at}|${row.id}`).toString('base64url');
}

// `at` as both stores write it (their `now` defaults): 2026-01-31T12:00:00.000Z.
const AUDIT_CURSOR_RE = /^a1:(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)\|([1-9][0-9]{0,15})$/;

/**
 * The entry a cursor names. A cursor of the former id-ordered pages (`v1:<id>`) still reads
 * on below its entry, while that entry exists.
 */
async function decodeAuditCursor(ctx: WorkspaceContext, cursor: string | undefined): Promise<AuditKey | undefined> {
  if (cursor === undefined || cursor === '') return undefined;
  const text = /^[A-Za-z0-9_-]{1,96}$/.test(cursor) ? Buffer.from(cursor, 'base64url').toString('utf8') : '';
  const match = AUDIT_CURSOR_RE.exec(text);
  if (match) return { at: match[1]!, id: Number(match[2]) };
  const id = decodeCursor(cursor)!;
  const [row] = await ctx.db
    .select({ at: auditLogs.at, id: auditLogs.id })
    .from(auditLogs)
    .where(inWorkspace(ctx, auditLogs.workspaceId, eq(auditLogs.id, id)));
  if (!row) throw new BadRequestError('invalid_cursor', 'The entry this cursor names no longer exists; start again from the first page');
  return row;
}

/** Entries older than the key in the list's order. `at <= ?` alone bounds the index range. */
function olderThan(key: AuditKey | undefined): SQL | undefined {
  if (!key) return undefined;
  return and(lte(auditLogs.at, key.at), or(lt(auditLogs.at, key.at), lt(auditLogs.id, key.id)));
}

/** What one list request asks for, parsed. */
interface AuditQuery {
  /** Exact actions (one for `action=`, the matching ones for a prefix); undefined: any. */
  actions: string[] | undefined;
  actorType: ActorType | undefined;
  since: string | undefined;
  until: string | undefined;
}

/**
 * One statement of a page: the workspace's entries older than `key` (with one action when
 * given, and `also` checked on each), newest first. Exported so that tests can EXPLAIN it.
 */
export function auditPageQuery(
  ctx: WorkspaceContext,
  q: { action?: string | undefined; actorType?: ActorType | undefined; since?: string | undefined; until?: string | undefined },
  key: AuditKey | undefined,
  chunk: number,
  also?: SQL,
) {
  return ctx.db
    .select()
    .from(auditLogs)
    .where(
      inWorkspace(
        ctx,
        auditLogs.workspaceId,
        q.actorType ? eq(auditLogs.actorType, q.actorType) : undefined,
        q.action !== undefined ? eq(auditLogs.action, q.action) : undefined,
        q.since ? gte(auditLogs.at, q.since) : undefined,
        q.until ? lt(auditLogs.at, q.until) : undefined,
        olderThan(key),
        also,
      ),
    )
    .orderBy(desc(auditLogs.at), desc(auditLogs.id))
    .limit(chunk);
}

/** Newest first: later `at`, then the larger id. */
const newestFirst = (a: AuditRow, b: AuditRow): number => (a.at < b.at ? 1 : a.at > b.at ? -1 : b.id - a.id);

/** The most actions a prefix is merged from; the vocabulary is svc's own (a few dozen). */
const MAX_PREFIX_ACTIONS = 200;

/**
 * The workspace's actions (of one actor type, when given) that start with `prefix`: the
 * distinct actions walked along the action index, one seek each. Compared in JavaScript, so
 * that no database collation decides what a prefix matches.
 */
async function actionsWithPrefix(ctx: WorkspaceContext, prefix: string, actorType: ActorType | undefined): Promise<string[] | undefined> {
  const found: string[] = [];
  let after: string | undefined;
  for (let seen = 0; seen <= MAX_PREFIX_ACTIONS * 4; seen++) {
    const [row] = await ctx.db
      .select({ action: auditLogs.action })
      .from(auditLogs)
      .where(
        inWorkspace(
          ctx,
          auditLogs.workspaceId,
          actorType ? eq(auditLogs.actorType, actorType) : undefined,
          after !== undefined ? gt(auditLogs.action, after) : undefined,
        ),
      )
      .orderBy(asc(auditLogs.action))
      .limit(1);
    if (!row) return found;
    if (row.action.startsWith(prefix)) {
      found.push(row.action);
      if (found.length > MAX_PREFIX_ACTIONS) return undefined;
    }
    after = row.action;
  }
  return undefined;
}

/** Up to `chunk` entries older than `key`, newest first, for the parsed query. */
async function readChunk(ctx: WorkspaceContext, q: AuditQuery, key: AuditKey | undefined, chunk: number): Promise<AuditRow[]> {
  if (q.actions === undefined) return auditPageQuery(ctx, q, key, chunk);
  if (q.actions.length === 1) return auditPageQuery(ctx, { ...q, action: q.actions[0] }, key, chunk);
  const merged: AuditRow[] = [];
  for (const action of q.actions) merged.push(...(await auditPageQuery(ctx, { ...q, action }, key, chunk)));
  return merged.sort(newestFirst).slice(0, chunk);
}

/** The workspace's audit trail, newest first, with optional filters. */
export async function listAuditLogs(ctx: WorkspaceContext, filter: AuditLogFilter): Promise<Page<AuditLogView>> {
  const since = filter.since === undefined ? undefined : parseTimestamp(filter.since, 'since');
  const until = filter.until === undefined ? undefined : parseTimestamp(filter.until, 'until');
  const { action, actorType } = filter;
  let actions: string[] | undefined;
  let prefix: string | undefined;
  if (action !== undefined && action !== '') {
    if (action.endsWith('.*')) {
      prefix = action.slice(0, -1); // keeps the dot: "contact."
      actions = await actionsWithPrefix(ctx, prefix, actorType);
    } else actions = [action];
  }
  const key = await decodeAuditCursor(ctx, filter.cursor);
  if (actions?.length === 0) return { data: [], nextCursor: null };
  const q: AuditQuery = { actions, actorType, since, until };
  // More actions than any svc writes: the prefix is checked on each entry instead (substr,
  // not LIKE, so that "_" and "%" in it are taken literally).
  const scanned = prefix !== undefined && actions === undefined ? sql`substr(${auditLogs.action}, 1, ${prefix.length}) = ${prefix}` : undefined;
  const read = (k: AuditKey | undefined, chunk: number) => (scanned ? auditPageQuery(ctx, q, k, chunk, scanned) : readChunk(ctx, q, k, chunk));
  const { rows, limit } = await readWithinBudget(filter.limit, (last: AuditRow | undefined, chunk) => read(last ?? key, chunk));
  return auditPage(rows, limit);
}

/** limit+1 rows (or the rows that fit and the first that did not) as a page. */
function auditPage(rows: AuditRow[], limit: number): Page<AuditLogView> {
  const more = rows.length > limit;
  const pageRows = more ? rows.slice(0, limit) : rows;
  const last = pageRows[pageRows.length - 1];
  return { data: pageRows.map(view), nextCursor: more && last ? encodeAuditCursor(last) : null };
}
