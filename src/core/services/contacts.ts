import { and, asc, desc, eq, gt, inArray, lt, or, sql, type SQL } from 'drizzle-orm';
import { recordAudit } from '../audit.js';
import { inWorkspace, newestInWorkspace, nowIso, windowEnd, withTransaction, type WorkspaceContext } from '../context.js';
import type { SQLiteColumn } from 'drizzle-orm/sqlite-core';
import { contactSearch, escapeLike, execute, queryRows } from '../db/dialect.js';
import type { Store } from '../db/store.js';
import { contacts, contactTags, tagCounts, workflowRuns } from '../db/schema.js';
import { changeRunsInSteps } from './cascade.js';
import { BadRequestError, ConflictError, NotFoundError, ValidationError, type FieldError } from '../errors.js';
import { decodeCursor, LIST_SCAN_ROWS, toPage, type Page } from '../pagination.js';
import { ATTRIBUTES_MAX_BYTES, jsonDepthExceeds, MAX_JSON_DEPTH, MAX_TAGS_PER_CONTACT, normalizeEmail, normalizePhone } from '../validation.js';

export interface ContactView {
  id: number;
  email: string | null;
  phone: string | null;
  firstName: string | null;
  lastName: string | null;
  attributes: Record<string, unknown>;
  tags: string[];
  createdAt: string;
  updatedAt: string;
}

export interface ContactInput {
  email?: string | null | undefined;
  phone?: string | null | undefined;
  firstName?: string | null | undefined;
  lastName?: string | null | undefined;
  attributes?: Record<string, unknown> | undefined;
  tags?: string[] | undefined;
}

export const TAG_MAX_LENGTH = 64;
/** Tags one write (a body, an import's row) may name. */
export const TAGS_PER_WRITE_MAX = 100;
/** The longest text each field may be, in characters (code points, as the API's JSON Schema counts them). */
export const CONTACT_FIELD_MAX_LENGTH = { email: 320, phone: 64, firstName: 200, lastName: 200 } as const;
export { ATTRIBUTES_MAX_BYTES };

/** An error when `value` is longer than its field allows, worded as the API's schema words it. */
function tooLong(field: keyof typeof CONTACT_FIELD_MAX_LENGTH, value: string): FieldError | undefined {
  const max = CONTACT_FIELD_MAX_LENGTH[field];
  // UTF-16 units are at least as many as code points: counted only when they are over.
  if (value.length <= max || [...value].length <= max) return undefined;
  return { path: `/${field}`, message: `must NOT have more than ${max} characters` };
}

type ContactRow = typeof contacts.$inferSelect;

function view(row: ContactRow, tags: string[]): ContactView {
  return {
    id: row.id,
    email: row.email,
    phone: row.phone,
    firstName: row.firstName,
    lastName: row.lastName,
    attributes: row.attributes,
    tags,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
  };
}

/**
 * The tags of a page of contacts (exported so that tests can EXPLAIN it). The workspace is
 * checked on each row (`+workspace_id`), not used to pick the index: otherwise SQLite walked
 * the workspace's whole tag index (every `vip` of a million contacts) for 50 contacts.
 */
export function contactTagsQuery(ctx: WorkspaceContext, ids: number[]) {
  return ctx.db
    .select({ contactId: contactTags.contactId, name: contactTags.name })
    .from(contactTags)
    .where(and(sql`+${contactTags.workspaceId} = ${ctx.workspaceId}`, inArray(contactTags.contactId, ids)))
    .orderBy(asc(contactTags.tagKey));
}

async function tagsFor(ctx: WorkspaceContext, ids: number[]): Promise<Map<number, string[]>> {
  const map = new Map<number, string[]>();
  if (!ids.length) return map;
  const rows = await contactTagsQuery(ctx, ids);
  for (const r of rows) map.set(r.contactId, [...(map.get(r.contactId) ?? []), r.name]);
  return map;
}

async function findRow(ctx: WorkspaceContext, id: number): Promise<ContactRow> {
  const [row] = await ctx.db
    .select()
    .from(contacts)
    .where(inWorkspace(ctx, contacts.workspaceId, eq(contacts.id, id)));
  if (!row) throw new NotFoundError('contact_not_found', `No contact with id ${id}`);
  return row;
}

export async function getContact(ctx: WorkspaceContext, id: number): Promise<ContactView> {
  const row = await findRow(ctx, id);
  return view(row, (await tagsFor(ctx, [id])).get(id) ?? []);
}

/** Validates tag names and drops case-insensitive duplicates, keeping the first spelling. */
export function normalizeTags(tags: string[], path = '/tags'): string[] {
  const errors: FieldError[] = [];
  const seen = new Map<string, string>();
  tags.forEach((raw, i) => {
    const name = raw.trim();
    // Characters are code points (as for names): 33 emoji are 66 UTF-16 units, and 33 characters.
    if (name.length < 1 || (name.length > TAG_MAX_LENGTH && [...name].length > TAG_MAX_LENGTH))
      errors.push({ path: `${path}/${i}`, message: `must be 1 to ${TAG_MAX_LENGTH} characters` });
    else if (!seen.has(name.toLowerCase())) seen.set(name.toLowerCase(), name);
  });
  if (errors.length) throw new ValidationError('validation_failed', 'Some tag names are invalid', errors);
  return [...seen.values()];
}

export interface Normalized {
  email?: string | null;
  phone?: string | null;
  firstName?: string | null;
  lastName?: string | null;
}

/** The same normalisation for POST/PATCH /contacts and for imports: throws ValidationError with every field at fault. */
export function normalizeInput(ctx: Pick<WorkspaceContext, 'config'>, input: ContactInput): Normalized {
  const errors: FieldError[] = [];
  const out: Normalized = {};
  // What the API's schema refuses before a body gets here, checked for every door (an import's rows).
  for (const field of ['email', 'phone', 'firstName', 'lastName'] as const) {
    const value = input[field];
    const error = typeof value === 'string' ? tooLong(field, value) : undefined;
    if (error) errors.push(error);
  }
  if (errors.length) throw new ValidationError('validation_failed', 'The contact is invalid', errors);
  if (input.email !== undefined) {
    out.email = input.email === null ? null : (normalizeEmail(input.email) ?? null);
    if (input.email !== null && !out.email) errors.push({ path: '/email', message: 'must be an email address' });
  }
  if (input.phone !== undefined) {
    out.phone = input.phone === null ? null : (normalizePhone(input.phone, ctx.config.defaultPhoneRegion) ?? null);
    if (input.phone !== null && !out.phone)
      errors.push({ path: '/phone', message: 'must be a valid phone number (E.164, or national for the default region)' });
  }
  for (const field of ['firstName', 'lastName'] as const) {
    const value = input[field];
    if (value === undefined) continue;
    out[field] = value === null ? null : value.trim() || null;
  }
  if (input.attributes !== undefined) {
    if (jsonDepthExceeds(input.attributes, MAX_JSON_DEPTH)) errors.push({ path: '/attributes', message: `must nest at most ${MAX_JSON_DEPTH} levels deep` });
    else if (Buffer.byteLength(JSON.stringify(input.attributes)) > ATTRIBUTES_MAX_BYTES) {
      errors.push({ path: '/attributes', message: `must be at most ${ATTRIBUTES_MAX_BYTES} bytes of JSON` });
    }
  }
  if (errors.length) throw new ValidationError('validation_failed', 'The contact is invalid', errors);
  return out;
}

async function assertUnique(ctx: WorkspaceContext, values: Normalized, exceptId?: number): Promise<void> {
  for (const field of ['email', 'phone'] as const) {
    const value = values[field];
    if (!value) continue;
    const [clash] = await ctx.db
      .select({ id: contacts.id })
      .from(contacts)
      .where(inWorkspace(ctx, contacts.workspaceId, eq(contacts[field], value)));
    if (clash && clash.id !== exceptId) {
      throw new ConflictError('contact_exists', `Another contact (id ${clash.id}) already has this ${field}`);
    }
  }
}

function requireEmailOrPhone(email: string | null | undefined, phone: string | null | undefined): void {
  if (!email && !phone) {
    throw new ValidationError('email_or_phone_required', 'A contact needs an email or a phone number', [
      { path: '/email', message: 'email or phone is required' },
    ]);
  }
}

async function insertTags(ctx: WorkspaceContext, contactId: number, names: string[]): Promise<string[]> {
  const added: string[] = [];
  for (const name of names) {
    const inserted = await ctx.db
      .insert(contactTags)
      .values({ contactId, workspaceId: ctx.workspaceId, tagKey: name.toLowerCase(), name })
      .onConflictDoNothing()
      .returning({ contactId: contactTags.contactId });
    if (inserted.length) added.push(name);
  }
  if (added.length) {
    // In the caller's transaction: over the bound, it is rolled back with nothing added.
    const [row] = await ctx.db.select({ n: sql<number>`count(*)` }).from(contactTags).where(eq(contactTags.contactId, contactId));
    if (Number(row?.n ?? 0) > MAX_TAGS_PER_CONTACT)
      throw new ValidationError('too_many_tags', `A contact has at most ${MAX_TAGS_PER_CONTACT} tags`, [
        { path: '/tags', message: `would take the contact over ${MAX_TAGS_PER_CONTACT} tags` },
      ]);
  }
  return added;
}

export async function createContact(ctx: WorkspaceContext, input: ContactInput): Promise<ContactView> {
  return insertContact(ctx, input, (tx, id) => getContact(tx, id));
}

/** createContact for a caller that needs only the new contact's id (a webhook creating its contact). */
export function createContactId(ctx: WorkspaceContext, input: ContactInput): Promise<number> {
  return insertContact(ctx, input, async (_tx, id) => id);
}

/**
 * A new contact's attributes: a `null` value is no attribute, as a PATCH removes one with it
 * (JSON Merge Patch applied to nothing). Stored, it was exported as `null`, and the export
 * imported back as an update removed it: an export did not round-trip.
 */
export function withoutNulls(attributes: Record<string, unknown>): Record<string, unknown> {
  if (!Object.values(attributes).includes(null)) return attributes;
  return Object.fromEntries(Object.entries(attributes).filter(([, v]) => v !== null));
}

function insertContact<T>(ctx: WorkspaceContext, input: ContactInput, answer: (tx: WorkspaceContext, id: number) => Promise<T>): Promise<T> {
  const values = normalizeInput(ctx, input);
  requireEmailOrPhone(values.email, values.phone);
  const tags = normalizeTags(input.tags ?? []);
  return withTransaction(
    ctx,
    async (tx) => {
      await assertUnique(tx, values);
      const [row] = await tx.db
        .insert(contacts)
        .values({ workspaceId: ctx.workspaceId, ...values, attributes: withoutNulls(input.attributes ?? {}) })
        .returning({ id: contacts.id });
      if (!row) throw new Error('the insert returned no row');
      await insertTags(tx, row.id, tags);
      await recordAudit(tx, { workspaceId: ctx.workspaceId, action: 'contact.created', target: { type: 'contact', id: row.id } });
      return answer(tx, row.id);
    },
    // Every rule here is a unique index (email, phone) or a row lock (the counters): see TransactionOptions.
    { isolation: 'read committed' },
  );
}

/**
 * Updates the given fields. `attributes` merges one level deep (a null value removes the
 * key), as in JSON Merge Patch, so a client can set one attribute without resending all.
 */
export function updateContact(ctx: WorkspaceContext, id: number, input: Omit<ContactInput, 'tags'>): Promise<ContactView> {
  const values = normalizeInput(ctx, input);
  return withTransaction(ctx, async (tx) => {
    const row = await findRow(tx, id);
    const email = values.email !== undefined ? values.email : row.email;
    const phone = values.phone !== undefined ? values.phone : row.phone;
    requireEmailOrPhone(email, phone);
    await assertUnique(tx, values, id);
    let attributes = row.attributes;
    if (input.attributes !== undefined) {
      attributes = { ...row.attributes };
      for (const [k, v] of Object.entries(input.attributes)) {
        if (v === null) delete attributes[k];
        else attributes[k] = v;
      }
      if (Buffer.byteLength(JSON.stringify(attributes)) > ATTRIBUTES_MAX_BYTES) {
        throw new ValidationError('validation_failed', 'The contact is invalid', [
          { path: '/attributes', message: `must be at most ${ATTRIBUTES_MAX_BYTES} bytes of JSON` },
        ]);
      }
    }
    await tx.db
      .update(contacts)
      .set({ ...values, attributes, updatedAt: nowIso() })
      .where(inWorkspace(tx, contacts.workspaceId, eq(contacts.id, id)));
    await recordAudit(tx, {
      workspaceId: ctx.workspaceId,
      action: 'contact.updated',
      target: { type: 'contact', id },
      metadata: { fields: Object.keys(input) },
    });
    return getContact(tx, id);
  });
}

export async function deleteContact(ctx: WorkspaceContext, id: number): Promise<void> {
  await findRow(ctx, id);
  // Its runs are unlinked in steps first: the DELETE's own SET NULL would do them in one.
  await changeRunsInSteps(ctx, eq(workflowRuns.contactId, id), 'unlink');
  await withTransaction(ctx, async (tx) => {
    await findRow(tx, id);
    await tx.db.delete(contacts).where(inWorkspace(tx, contacts.workspaceId, eq(contacts.id, id)));
    await recordAudit(tx, { workspaceId: ctx.workspaceId, action: 'contact.deleted', target: { type: 'contact', id } });
  });
}

export interface ContactFilter {
  limit: number;
  cursor?: string | undefined;
  tag?: string | undefined;
  email?: string | undefined;
  phone?: string | undefined;
  q?: string | undefined;
}

/**
 * The trigram index matches substrings of 3 characters or more. A shorter `q` (one or two
 * characters) cannot use it: it is matched with LIKE while walking the workspace's contacts
 * newest first, which is quick when the characters are common (the page fills at once)
 * and reads the whole workspace when they are rare.
 */
export const SEARCH_MIN_INDEXED_LENGTH = 3;

/**
 * How many contacts' ids a page with a short `q` spans at most (alone or beside a tag; other
 * per-row checks: LIST_SCAN_ROWS). Matching four fields of each row read costs more than a
 * tag's lookup, so its window is narrower, for a page at a million contacts to cost about
 * what the whole of a small workspace does; a rare pair of characters then takes more
 * (short or empty) pages to walk, each as quick.
 */
export const SHORT_Q_SCAN_ROWS = 2_500;

/**
 * The query a page of GET /contacts runs (exported so that tests can EXPLAIN it): newest
 * first, seeking below the cursor. One filter drives through its index: email or phone
 * (unique indexes), else `q` (the trigram index), else a tag (`contact_tags (workspace_id,
 * tag_key, contact_id)`); when it is the only filter its subquery stops after a page's worth
 * of ids. The other filters are checked on the driver's rows: a tag and `q` by a lookup per
 * row (the tag's primary key, the trigram index at that rowid), never by a second list.
 */
export function contactListQuery(ctx: WorkspaceContext, filter: ContactFilter, beyond: number | null = null, tagged?: number[], matched?: number[]) {
  const { before, take, indexedQ, shortQ, tagKey, alone, driver } = listPlan(filter, ctx.store.dialect, tagged, matched);
  const conditions: (SQL | undefined)[] = [before ? lt(contacts.id, before) : undefined, beyond !== null ? gt(contacts.id, beyond) : undefined];
  if (filter.email !== undefined) conditions.push(eq(contacts.email, normalizeEmail(filter.email) ?? filter.email.trim().toLowerCase()));
  if (filter.phone !== undefined) conditions.push(eq(contacts.phone, normalizePhone(filter.phone, ctx.config.defaultPhoneRegion) ?? filter.phone.trim()));
  if (driver === 'tagged') {
    // The tag's few contacts below the cursor, read by id (fewTagged): they are the tag's.
    conditions.push(inArray(contacts.id, tagged!));
  } else if (driver === 'matched') {
    // A q's matches below the cursor, read by id (fewMatches on SQLite, pgMatches on PostgreSQL): no other filter is set.
    conditions.push(inArray(contacts.id, matched!));
  } else if (tagKey !== undefined && driver === 'tag') {
    const rows = alone ? tagRows(ctx, tagKey, before, beyond).limit(take) : tagRows(ctx, tagKey, before, beyond);
    // PostgreSQL looks the tag's contacts up by id. Joined to them (`IN`), it read the contacts
    // of the window's id range along the primary key, which on a first page runs up through
    // every newer contact of other workspaces: tag=vip&q=7, a million contacts under 800,000
    // newer ones, took 230-580 ms; the window's 250 tagged contacts by id, 1 ms
    // (test/server/pgListPlans.test.ts).
    conditions.push(ctx.store.dialect === 'pg' ? sql`${contacts.id} = ANY(ARRAY(${rows}))` : inArray(contacts.id, rows));
  } else if (tagKey !== undefined) {
    conditions.push(sql`EXISTS (SELECT 1 FROM ${contactTags} WHERE ${contactTags.contactId} = ${contacts.id} AND ${contactTags.tagKey} = ${tagKey})`);
  }
  if (indexedQ !== undefined && driver === 'q') {
    // SQLite (on PostgreSQL a q alone is always 'matched': pgMatches). A window is the driver's
    // next LIST_SCAN_ROWS matches from the cursor down.
    const limit = beyond !== null ? LIST_SCAN_ROWS : alone ? take : undefined;
    conditions.push(sql`${contacts.id} IN (${contactSearch.ids(ctx.workspaceId, indexedQ, before, limit)})`);
  } else if (indexedQ !== undefined && driver !== 'matched') {
    conditions.push(contactSearch.matches(ctx.store, ctx.workspaceId, indexedQ, contacts.id));
  }
  if (shortQ !== undefined && ctx.store.dialect === 'pg') {
    // PostgreSQL: LIKE on the stored, lower-cased text (migrations/pg/0008), which has each field on a line.
    conditions.push(contactSearch.matches(ctx.store, ctx.workspaceId, shortQ, contacts.id));
  } else if (shortQ !== undefined) {
    const pattern = `%${escapeLike(shortQ.toLowerCase())}%`;
    // SQLite's LIKE ignores the case of ASCII letters by itself (lower() on each field of
    // each row scanned only added to the cost of the scan: bench:scale, q=zq at a million
    // contacts), but not of others: a q with any is matched on each field folded by
    // svc_lower (connection.ts), like the trigram index folds them.
    const fold = /[^\p{ASCII}]/u.test(shortQ) ? sql.raw('svc_lower') : undefined;
    const likeEsc = (col: SQLiteColumn) => sql`${fold ? sql`${fold}(${col})` : col} LIKE ${pattern} ESCAPE '\\'`;
    conditions.push(or(likeEsc(contacts.email), likeEsc(contacts.phone), likeEsc(contacts.firstName), likeEsc(contacts.lastName)));
  }
  // Where the workspace's contacts or a tag's drive, along an index that starts with the workspace.
  const { where, orderBy } =
    driver === 'list' || driver === 'tag'
      ? newestInWorkspace(ctx, contacts.workspaceId, contacts.id, ...conditions)
      : { where: inWorkspace(ctx, contacts.workspaceId, ...conditions), orderBy: [desc(contacts.id)] };
  return ctx.db
    .select()
    .from(contacts)
    .where(where)
    .orderBy(...orderBy)
    .limit(take);
}

/**
 * How a page of GET /contacts is read: which filter drives it through its index, which are
 * checked per row. `tagged`: the tag's contacts below the cursor, when they are few (fewTagged).
 * A tag beside an indexed q: on SQLite q drives (FTS5 walks its matches in order; a check of q
 * on one row walks its postings to that row), on PostgreSQL the tag (the trigram index has no
 * order, and q checked on one row is a plain LIKE on its stored text): there, with q driving beside
 * tag=vip, bench:scale's pages at a million contacts whose matches sat far below the cursor did
 * not finish 1,100 requests in ten minutes.
 */
function listPlan(filter: ContactFilter, dialect: Store['dialect'], tagged?: number[], matched?: number[]) {
  const before = decodeCursor(filter.cursor);
  const take = filter.limit + 1;
  const q = filter.q?.trim() ?? '';
  const indexedQ = [...q].length >= SEARCH_MIN_INDEXED_LENGTH ? q : undefined;
  const shortQ = q !== '' && indexedQ === undefined ? q : undefined;
  const tagKey = filter.tag?.trim().toLowerCase();
  const alone = [filter.email, filter.phone, tagKey, indexedQ, shortQ].filter((f) => f !== undefined).length === 1;
  const driver =
    filter.email !== undefined || filter.phone !== undefined
      ? 'unique'
      : tagged !== undefined
        ? 'tagged'
        : matched !== undefined
          ? 'matched'
          : indexedQ !== undefined && (tagKey === undefined || dialect === 'sqlite')
            ? 'q'
            : tagKey !== undefined
              ? 'tag'
              : 'list';
  // Filters checked on each of the driver's rows (a short q is never a driver).
  const perRow = [tagKey, indexedQ, shortQ].filter((f) => f !== undefined).length - (driver === 'list' ? 0 : 1);
  return { before, take, indexedQ, shortQ, tagKey, alone, driver, windowed: driver !== 'unique' && driver !== 'tagged' && driver !== 'matched' && perRow > 0 };
}

/**
 * A tag beside a `q` this few contacts below the cursor or fewer: the page reads them by id
 * and checks `q` on each, instead of examining up to LIST_SCAN_ROWS of the search's matches
 * for the tag (a rare or unknown tag beside a common q read 10,000 matches for an empty page).
 * Few, because the search checked on one row costs far more than reading one of its matches
 * (SQLite's FTS5 walks the phrase's postings to that row).
 */
export const FEW_TAGGED = 32;

/** The tag's contacts below the cursor, newest first, when a tag and an indexed `q` are filtered and there are at most FEW_TAGGED. */
async function fewTagged(ctx: WorkspaceContext, filter: ContactFilter): Promise<number[] | undefined> {
  const { before, tagKey, driver } = listPlan(filter, ctx.store.dialect);
  if (driver !== 'q' || tagKey === undefined) return undefined;
  const rows = await tagRows(ctx, tagKey, before).limit(FEW_TAGGED + 1);
  return rows.length <= FEW_TAGGED ? rows.map((r) => r.id) : undefined;
}

/**
 * SQLite, a q alone: its matches below the cursor, newest first, when there are at most a
 * page's worth (`take`), read oldest first in full (FTS5's quick direction: contactSearch.oldestIds)
 * with one more to tell; undefined when there are more (the page is then read newest first
 * from the cursor, a walk that stops after the page). A search for one contact by name or
 * address, the commonest, is then several times cheaper at a million contacts (README,
 * Reads at scale).
 */
async function fewMatches(ctx: WorkspaceContext, filter: ContactFilter): Promise<number[] | undefined> {
  const { before, take, indexedQ, alone, driver } = listPlan(filter, ctx.store.dialect);
  if (driver !== 'q' || !alone || ctx.store.dialect !== 'sqlite') return undefined;
  const rows = await queryRows(ctx.store, ctx.db, contactSearch.oldestIds(ctx.workspaceId, indexedQ!, before, take + 1));
  return rows.length <= take ? rows.map((r) => Number(Object.values(r)[0])).reverse() : undefined;
}

/** How many contacts below the cursor a PostgreSQL search walks before it takes the trigram index (pgMatches). */
export const PG_SEARCH_WALK_ROWS = 2_000;

/**
 * PostgreSQL, a q alone: the page's matches below the cursor, newest first (at most `take`).
 * The trigram index finds a q's matches but not in order: the planner either walks the
 * workspace's contacts newest first, checking each, until the page fills, or takes every match
 * from the index and sorts them; it chooses by a guess of how many match, spread evenly. At a
 * million contacts whose matches sat far below the newest (a list imported in order of name),
 * it walked: q=Smith77 took p50 178 / p99 377 ms (README, Reads at scale). Here the walk is
 * bounded, PG_SEARCH_WALK_ROWS contacts; when they hold less than the page, the next
 * PG_SEARCH_BUCKETS candidate buckets below them are read (migrations/pg/0009: each a stretch
 * of ids holding every piece of q), and only when those leave the page short does the rest
 * come from the index below them, in a transaction that forbids the planner the walk.
 * `q=Smith7` below a cursor above its 111,111 matches had read and sorted them all (p50 56-77
 * ms at a million); its first two candidate buckets hold the page.
 */
async function pgMatches(ctx: WorkspaceContext, filter: ContactFilter): Promise<number[] | undefined> {
  const { before, take, indexedQ, alone, driver } = listPlan(filter, ctx.store.dialect);
  if (driver !== 'q' || !alone || ctx.store.dialect !== 'pg') return undefined;
  const [walk] = await queryRows<{ end: unknown; n: unknown; ids: unknown[] | null }>(
    ctx.store,
    ctx.db,
    contactSearch.pgWalk(ctx.workspaceId, indexedQ!, before, PG_SEARCH_WALK_ROWS, take),
  );
  const ids = (walk?.ids ?? []).map(Number);
  if (ids.length >= take || Number(walk?.n ?? 0) < PG_SEARCH_WALK_ROWS) return ids;
  let end = Number(walk!.end);
  // Then the next candidate buckets below the walk (contact_search_buckets): the stretches of
  // 2,048 ids that can hold a match, each read along the primary key. Fewer candidates than
  // asked for means no match lies below them. Two: where the matches are many and together
  // (a list imported in order of name), the first may hold only the top of their stretch and
  // the second is full; where they are few and spread, each bucket read in vain costs about
  // a millisecond, and the trigram index below them does better.
  const pieces = searchPieces(indexedQ!);
  if (pieces.length && !indexedQ!.includes('\n') && !indexedQ!.includes('\u0000')) {
    const need = take - ids.length;
    const rows = await queryRows<{ bucket: unknown; id: unknown }>(
      ctx.store,
      ctx.db,
      contactSearch.pgBuckets(ctx.workspaceId, indexedQ!, pieces, end, need, PG_SEARCH_BUCKETS),
    );
    const found = rows
      .filter((r) => r.id !== null)
      .map((r) => Number(r.id))
      .sort((a, b) => b - a)
      .slice(0, need);
    const buckets = new Set(rows.map((r) => Number(r.bucket)));
    if (found.length >= need || buckets.size < PG_SEARCH_BUCKETS) return [...ids, ...found];
    ids.push(...found);
    end = Math.min(...buckets) * PG_SEARCH_BUCKET_IDS;
  }
  const lookUp = await pgLookUpPart(ctx, indexedQ!);
  const rest = await withTransaction(
    ctx,
    async (tx) => {
      // Only the index's bitmap is left to the planner (its other choices walk or read every contact).
      await execute(tx.store, tx.db, sql`SELECT set_config('enable_indexscan', 'off', true), set_config('enable_seqscan', 'off', true)`);
      return queryRows(tx.store, tx.db, contactSearch.pgIndexed(tx.workspaceId, indexedQ!, end, take - ids.length, lookUp));
    },
    { isolation: 'read committed' },
  );
  return [...ids, ...rest.map((r) => Number(Object.values(r)[0]))];
}

/** How many candidate buckets (contact_search_buckets) a PostgreSQL search reads before it takes the trigram index (pgMatches). */
export const PG_SEARCH_BUCKETS = 2;
/** The ids a bucket spans (migrations/pg/0009: id >> 11). */
const PG_SEARCH_BUCKET_IDS = 2048;

/**
 * The trigrams every contact matching q holds among those of its searched text as pg_trgm's
 * show_trgm gives them (contact_search_buckets, migrations/pg/0009): the three-character pieces
 * of q's runs of ASCII letters and digits, lower-cased (at most 16, spread along q). Such a run
 * lies inside one word of any text holding q, since ASCII letters and digits are a word's
 * characters in every locale, and show_trgm holds every piece of a word. A character outside
 * ASCII ends a run: lower() may fold it differently, and pg_trgm stores its pieces hashed. None
 * (a q like `@ex.co` or `émile`): the buckets cannot help, and the search goes without them.
 */
export function searchPieces(q: string): string[] {
  const pieces = new Set<string>();
  for (const [run] of q.matchAll(/[A-Za-z0-9]{3,}/g)) {
    const lower = run.toLowerCase();
    for (let i = 0; i + 3 <= lower.length; i++) pieces.add(lower.slice(i, i + 3));
  }
  const all = [...pieces];
  if (all.length <= PG_SEARCH_PIECES) return all;
  return Array.from({ length: PG_SEARCH_PIECES }, (_, i) => all[Math.round((i * (all.length - 1)) / (PG_SEARCH_PIECES - 1))]!);
}

/** How many of the workspace's newest contacts pgLookUpPart counts a q's pieces in. */
const PG_SEARCH_SAMPLE_ROWS = 256;
/** A piece of q held by more than this share of them is common. */
const PG_COMMON_PIECE = 1 / 20;
/** How many of a q's pieces are counted (those of its first 18 characters). */
const PG_SEARCH_PIECES = 16;

/**
 * PostgreSQL: the part of q the trigram index looks up (pgIndexed checks q itself on each
 * contact found). The index reads the whole list of every trigram of what it looks up; at a
 * million contacts whose emails all start with "user", `q=user123456@` (one match) read the
 * lists of "use" and "ser", a million entries each, in 12 ms, where its part "123456@" took 1
 * (EXPLAIN ANALYZE; README, Reads at scale). So q's three-character pieces are counted in the
 * workspace's newest PG_SEARCH_SAMPLE_ROWS contacts, and the index looks up the longest stretch
 * of q none of whose pieces is common there: q=Smith77 looks up "th77" when every contact is a
 * Smith. Only for a q of printable ASCII, where lower() of a part of q is a part of lower(q),
 * and only a part holding three letters or digits in a row (a trigram of a word; pg_trgm finds
 * none in less, and would read the whole index).
 */
async function pgLookUpPart(ctx: WorkspaceContext, q: string): Promise<string> {
  if (q.length < 4 || !/^[\x20-\x7e]+$/.test(q)) return q;
  const pieces = Array.from({ length: Math.min(q.length - 2, PG_SEARCH_PIECES) }, (_, i) => q.slice(i, i + 3));
  const [sample] = await queryRows<{ n: unknown; hits: unknown[] }>(ctx.store, ctx.db, contactSearch.pgSample(ctx.workspaceId, pieces, PG_SEARCH_SAMPLE_ROWS));
  const n = Number(sample?.n ?? 0);
  if (!n) return q;
  const rare = sample!.hits.map((hits) => Number(hits) <= n * PG_COMMON_PIECE);
  let best: [number, number] | undefined;
  for (let i = 0, from = -1; i < rare.length; i++) {
    if (!rare[i]) from = -1;
    else {
      if (from < 0) from = i;
      if (!best || i - from > best[1] - best[0]) best = [from, i];
    }
  }
  const part = best ? q.slice(best[0], best[1] + 3) : q;
  return /[A-Za-z0-9]{3}/.test(part) ? part : q;
}

/**
 * The ids of a tag's contacts below `before` (and above `beyond`), newest first, along the tag's
 * index (workspace_id, tag_key, contact_id): newestInWorkspace, so that the primary key
 * (contact_id, tag_key) cannot stand in for it on PostgreSQL.
 */
function tagRows(ctx: WorkspaceContext, tagKey: string, before: number | undefined, beyond: number | null = null) {
  const { where, orderBy } = newestInWorkspace(
    ctx,
    contactTags.workspaceId,
    contactTags.contactId,
    eq(contactTags.tagKey, tagKey),
    before ? lt(contactTags.contactId, before) : undefined,
    beyond !== null ? gt(contactTags.contactId, beyond) : undefined,
  );
  return ctx.db
    .select({ id: contactTags.contactId })
    .from(contactTags)
    .where(where)
    .orderBy(...orderBy);
}

/**
 * The id of the driver's first row past the next LIST_SCAN_ROWS below the cursor, when a page
 * has filters checked per row and more rows than that remain; null otherwise (the page reads
 * to the end). One seek and a skip along the driver's index. A tag's window is also at most
 * LIST_SCAN_ROWS contacts wide: PostgreSQL may walk the contacts of the window's id range
 * rather than the tag's rows, and a sparse tag's rows span many contacts.
 */
export async function listScanBeyond(ctx: WorkspaceContext, filter: ContactFilter): Promise<number | null> {
  const { before, indexedQ, shortQ, tagKey, driver, windowed } = listPlan(filter, ctx.store.dialect);
  if (!windowed) return null;
  if (driver === 'q') {
    const [row] = await queryRows(ctx.store, ctx.db, contactSearch.ids(ctx.workspaceId, indexedQ!, before, 1, LIST_SCAN_ROWS));
    return row ? Number(Object.values(row)[0]) : null;
  }
  const contactsBeyond = await windowEnd(ctx, contacts, before, 'index', undefined, shortQ !== undefined ? SHORT_Q_SCAN_ROWS : LIST_SCAN_ROWS);
  if (driver !== 'tag' || contactsBeyond === null) return contactsBeyond;
  const [tagRow] = await tagRows(ctx, tagKey!, before).limit(1).offset(LIST_SCAN_ROWS);
  return tagRow ? Math.max(Number(tagRow.id), contactsBeyond) : contactsBeyond;
}

/** `tryFewMatches`: false where a q is known to have more matches than the page (fewMatches would read them in vain). */
export async function listContacts(ctx: WorkspaceContext, filter: ContactFilter, tryFewMatches = true): Promise<Page<ContactView>> {
  // A cursor this server did not issue is 400 whatever the filters find: a tag no contact has
  // answered an empty page before the cursor was read.
  decodeCursor(filter.cursor);
  const tagged = await fewTagged(ctx, filter);
  const matched = tagged ? undefined : ((await pgMatches(ctx, filter)) ?? (tryFewMatches ? await fewMatches(ctx, filter) : undefined));
  if (tagged?.length === 0 || matched?.length === 0) return { data: [], nextCursor: null };
  const beyond = tagged || matched ? null : await listScanBeyond(ctx, filter);
  const rows = await contactListQuery(ctx, filter, beyond, tagged, matched);
  const tags = await tagsFor(
    ctx,
    rows.slice(0, filter.limit).map((r) => r.id),
  );
  return toPage(rows, filter.limit, (r) => view(r, tags.get(r.id) ?? []), beyond);
}

/**
 * Every contact the filters select, newest first, read in keyset pages of `chunk` so that
 * memory stays constant however many there are (the export streams from this).
 */
export async function* iterateContacts(ctx: WorkspaceContext, filter: Omit<ContactFilter, 'limit' | 'cursor'>, chunk = 1000): AsyncGenerator<ContactView[]> {
  let cursor: string | undefined;
  for (;;) {
    // After the first chunk, a q had more matches than a chunk: reading them oldest first again would most likely be in vain.
    const page = await listContacts(ctx, { ...filter, limit: chunk, ...(cursor ? { cursor } : {}) }, cursor === undefined);
    if (page.data.length) yield page.data;
    if (!page.nextCursor) return;
    cursor = page.nextCursor;
  }
}

export function addTags(ctx: WorkspaceContext, id: number, tags: string[]): Promise<ContactView> {
  const names = normalizeTags(tags);
  return withTransaction(ctx, async (tx) => {
    await findRow(tx, id);
    const added = await insertTags(tx, id, names);
    if (added.length) {
      await tx.db
        .update(contacts)
        .set({ updatedAt: nowIso() })
        .where(inWorkspace(tx, contacts.workspaceId, eq(contacts.id, id)));
      await recordAudit(tx, { workspaceId: ctx.workspaceId, action: 'contact.tags_added', target: { type: 'contact', id }, metadata: { tags: added } });
    }
    return getContact(tx, id);
  });
}

export async function removeTag(ctx: WorkspaceContext, id: number, tag: string): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    await findRow(tx, id);
    const removed = await tx.db
      .delete(contactTags)
      .where(inWorkspace(tx, contactTags.workspaceId, and(eq(contactTags.contactId, id), eq(contactTags.tagKey, tag.trim().toLowerCase()))))
      .returning({ contactId: contactTags.contactId });
    if (removed.length) {
      await tx.db
        .update(contacts)
        .set({ updatedAt: nowIso() })
        .where(inWorkspace(tx, contacts.workspaceId, eq(contacts.id, id)));
      await recordAudit(tx, { workspaceId: ctx.workspaceId, action: 'contact.tag_removed', target: { type: 'contact', id }, metadata: { tag: tag.trim() } });
    }
  });
}

/** Longest cursor /tags issues: a 64-character tag of 4-byte characters, base64url-encoded. */
export const TAG_CURSOR_MAX_LENGTH = 400;

/** A /tags cursor: base64url of the last tag key seen, with a version tag. Opaque to clients. */
export function encodeTagCursor(tagKey: string): string {
  return Buffer.from(`t1:${tagKey}`, 'utf8').toString('base64url');
}

export function decodeTagCursor(cursor: string | undefined): string | undefined {
  if (cursor === undefined || cursor === '') return undefined;
  const invalid = () => new BadRequestError('invalid_cursor', 'The cursor is not one this server issued');
  if (cursor.length > TAG_CURSOR_MAX_LENGTH || !/^[A-Za-z0-9_-]+$/.test(cursor)) throw invalid();
  const bytes = Buffer.from(cursor, 'base64url');
  const text = bytes.toString('utf8');
  // Only what encodeTagCursor produced: valid UTF-8, the prefix, a key of a tag's length.
  if (!text.startsWith('t1:') || !Buffer.from(text, 'utf8').equals(bytes) || encodeTagCursor(text.slice(3)) !== cursor) throw invalid();
  const key = text.slice(3);
  if (key.length < 1 || key.length > 128) throw invalid();
  // No tag key holds a control character (U+0000 above all, which PostgreSQL text cannot
  // hold: such a cursor reached the query and failed it, 500), nor starts or ends with a space.
  for (let i = 0; i < key.length; i++) if (key.charCodeAt(i) < 0x20) throw invalid();
  if (key !== key.trim()) throw invalid();
  return key;
}

/**
 * Tag names in this workspace with how many contacts carry each, by name (case-insensitively),
 * paged. The counts are kept by triggers in tag_counts (migration 0008), so a page reads
 * its rows only, however many contacts carry the tags.
 */
export async function listTags(ctx: WorkspaceContext, opts: { limit: number; cursor?: string | undefined }): Promise<Page<{ name: string; count: number }>> {
  const rows = await tagListQuery(ctx, opts);
  const more = rows.length > opts.limit;
  const page = more ? rows.slice(0, opts.limit) : rows;
  return { data: page.map(({ name, count }) => ({ name, count })), nextCursor: more ? encodeTagCursor(page[page.length - 1]!.key) : null };
}

/** The query a page of GET /tags runs (exported so that tests can EXPLAIN it). */
export function tagListQuery(ctx: WorkspaceContext, opts: { limit: number; cursor?: string | undefined }) {
  const after = decodeTagCursor(opts.cursor);
  return ctx.db
    .select({ key: tagCounts.tagKey, name: tagCounts.name, count: tagCounts.contacts })
    .from(tagCounts)
    .where(inWorkspace(ctx, tagCounts.workspaceId, after === undefined ? undefined : gt(tagCounts.tagKey, after), gt(tagCounts.contacts, 0)))
    .orderBy(asc(tagCounts.tagKey))
    .limit(opts.limit + 1);
}
