import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { and, count, desc, eq, lt, sql } from 'drizzle-orm';
import { recordAudit } from '../audit.js';
import { inWorkspace, nowIso, withTransaction, type SystemContext, type WorkspaceContext } from '../context.js';
import { execute, rawSql } from '../db/dialect.js';
import { isSqliteStore, isWriteConflict, type Store } from '../db/store.js';
import { compactSearchIndex } from '../db/searchIndex.js';
import { MAX_TAGS_PER_CONTACT, prototypeKeyPointer, TOO_MANY_TAGS, unstorableText } from '../validation.js';
import { contactImports, type ImportFormat, type ImportMode, type ImportRowError, type ImportStatus } from '../db/schema.js';
import { AppError, NotFoundError, ValidationError } from '../errors.js';
import { decodeCursor, toPage, type Page } from '../pagination.js';
import {
  ATTRIBUTES_MAX_BYTES,
  iterateContacts,
  normalizeInput,
  normalizeTags,
  withoutNulls,
  type ContactFilter,
  type ContactInput,
  type ContactView,
} from './contacts.js';
import { CsvSyntaxError, readCsvRecords, readNdjsonLines, utf8Bytes, type Piece, type RecordFault } from './importReader.js';

export interface ImportJobView {
  id: number;
  status: ImportStatus;
  format: ImportFormat;
  mode: ImportMode;
  created: number;
  updated: number;
  skipped: number;
  errorCount: number;
  /** The first 100 refused rows, by line. */
  errors: ImportRowError[];
  /** Every row that starts on or before this line of the file is committed. */
  lines: number;
  bytesRead: number;
  bytesTotal: number | null;
  failure: { code: string; detail: string } | null;
  createdAt: string;
  updatedAt: string;
  finishedAt: string | null;
}

/** Rows written per transaction: large enough to be fast, small enough not to hold the event loop long. */
export const IMPORT_BATCH_ROWS = 2000;
/** Refused rows kept on the job (the first by line); the rest are only counted. */
export const IMPORT_ERRORS_KEPT = 100;
/**
 * A line (NDJSON) or record (CSV) longer than this is refused without being held in memory.
 * Above the largest contact an export writes, so that every export imports back: 1,000 tags
 * of 64 characters written as JSON escapes (6 bytes each) are 387 KB, the attributes' 64 KiB
 * of JSON twice that in a CSV cell (each quote doubled), the rest a few KB.
 */
export const IMPORT_MAX_LINE_BYTES = 1024 * 1024;
/** A RUNNING job whose process has not written its heartbeat for this long is reported interrupted. */
export const IMPORT_STALE_MS = 60_000;
const HEARTBEAT_MS = 5_000;
/**
 * A file read without filling a batch for this long has its rows so far committed (and how far
 * it has been read saved), so that the job shows progress through a file of few rows, or of
 * nothing but blank lines.
 */
const PROGRESS_MS = 2_000;
/** The page cache (KiB) of the connection while an import runs. */
const IMPORT_CACHE_KIB = 16 * 1024;
/**
 * A batch's rows go in one multi-row statement per table. The search index (FTS5) writes what
 * its trigger gathered as a new segment at the end of every statement, and merges segments as
 * they pile up: one segment per batch leaves far fewer to merge than one per 100 rows (README,
 * "Reads at scale and bulk import"). 2,000 rows of contacts
 * bind 16,000 parameters: within SQLite's 32,766 and PostgreSQL's 65,535.
 */
const ROWS_PER_INSERT = IMPORT_BATCH_ROWS;
/** Contacts updated by one statement: a batch's, 2,000 rows of 6 values (SQLite: 12,002 variables; PostgreSQL: one JSON parameter). */
const ROWS_PER_UPDATE = IMPORT_BATCH_ROWS;

type JobRow = typeof contactImports.$inferSelect;

function jobView(row: JobRow): ImportJobView {
  return {
    id: row.id,
    status: row.status,
    format: row.format,
    mode: row.mode,
    created: row.created,
    updated: row.updated,
    skipped: row.skipped,
    errorCount: row.errorCount,
    errors: row.errors,
    lines: row.lines,
    bytesRead: row.bytesRead,
    bytesTotal: row.bytesTotal,
    failure: row.failureCode ? { code: row.failureCode, detail: row.failureDetail ?? '' } : null,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
    finishedAt: row.finishedAt,
  };
}

/** Jobs whose process stopped (crash, restart, kill) without finishing: FAILED `interrupted`, with what they committed. */
export async function failStaleImports(ctx: Pick<SystemContext, 'db' | 'store'>, now = Date.now()): Promise<number> {
  const cutoff = new Date(now - IMPORT_STALE_MS).toISOString();
  const at = new Date(now).toISOString();
  const stale = and(eq(contactImports.status, 'RUNNING'), lt(contactImports.heartbeatAt, cutoff));
  // Looked for first so that reading a job (polled while an import runs) does not queue
  // behind the import's batches for a write transaction that has nothing to do.
  const [any] = await ctx.db.select({ id: contactImports.id }).from(contactImports).where(stale).limit(1);
  if (!any) return 0;
  return withTransaction(ctx, async (tx) => {
    const failed = await tx.db
      .update(contactImports)
      .set({
        status: 'FAILED',
        failureCode: 'interrupted',
        failureDetail: 'The import stopped before the end of the file (the process running it ended); the counts are what was committed',
        finishedAt: at,
        updatedAt: at,
      })
      .where(stale)
      .returning({ id: contactImports.id });
    return failed.length;
  });
}

export async function getImport(ctx: WorkspaceContext, id: number): Promise<ImportJobView> {
  await failStaleImports(ctx);
  const [row] = await ctx.db
    .select()
    .from(contactImports)
    .where(inWorkspace(ctx, contactImports.workspaceId, eq(contactImports.id, id)));
  if (!row) throw new NotFoundError('import_not_found', `No import with id ${id}`);
  return jobView(row);
}

export async function listImports(ctx: WorkspaceContext, page: { limit: number; cursor?: string | undefined }): Promise<Page<ImportJobView>> {
  await failStaleImports(ctx);
  const before = decodeCursor(page.cursor);
  const rows = await ctx.db
    .select()
    .from(contactImports)
    .where(inWorkspace(ctx, contactImports.workspaceId, before ? lt(contactImports.id, before) : undefined))
    .orderBy(desc(contactImports.id))
    .limit(page.limit + 1);
  return toPage(rows, page.limit, jobView);
}

export interface ImportOptions {
  format: ImportFormat;
  mode: ImportMode;
  /** The declared length of the file, when known. */
  bytesTotal: number | null;
  /** The most bytes read before the import stops as too large. */
  maxBytes: number;
  /**
   * The file's character encoding, when it is not UTF-8 (a WHATWG Encoding label, such as
   * `windows-1252` or `latin1`: checkCharset): read through a decoder into UTF-8.
   */
  charset?: string | undefined;
}

/** UTF-8's labels (and ASCII, a subset): a file in them is read as it is. */
const UTF8_LABELS = new Set(['utf-8', 'utf8', 'unicode-1-1-utf-8', 'us-ascii', 'ascii']);

/**
 * The encoding a file declares (`charset=`), checked before anything is read: undefined for
 * UTF-8 (or none said), the label otherwise; a label no decoder knows is refused (415).
 */
export function checkCharset(label: string | undefined): string | undefined {
  const name = label
    ?.trim()
    .replace(/^"(.*)"$/, '$1')
    .toLowerCase();
  if (!name || UTF8_LABELS.has(name)) return undefined;
  try {
    new TextDecoder(name);
  } catch {
    throw new AppError(
      415,
      'unsupported_charset',
      `The charset "${name.slice(0, 40)}" is not one this server can read: send UTF-8, or name an encoding such as windows-1252, iso-8859-15 or utf-16le`,
    );
  }
  return name;
}

/** Refused before anything is read: the declared length is over the policy limit. */
export function checkDeclaredLength(declared: number | null, maxBytes: number): void {
  if (declared !== null && declared > maxBytes) {
    throw new AppError(413, 'import_too_large', `An import may be at most ${maxBytes} bytes; this one declares ${declared}`);
  }
}

/** Creates the job row (RUNNING); runImport then reads the file into it. */
/** Seconds a client refused for too many running imports is told to wait. */
const TOO_MANY_IMPORTS_RETRY_AFTER = 10;

/**
 * Starts a job. A workspace runs at most `importConcurrency` imports at once (each holds a
 * connection, a parser and a batch of rows, and they all queue for the one writer): one more
 * is refused with 429 before anything is read. Jobs whose process stopped beating do not count.
 */
export async function startImport(ctx: WorkspaceContext, opts: ImportOptions): Promise<ImportJobView> {
  checkDeclaredLength(opts.bytesTotal, opts.maxBytes);
  await failStaleImports(ctx);
  const row = await withTransaction(ctx, async (tx) => {
    const [running] = await tx.db
      .select({ n: count() })
      .from(contactImports)
      .where(inWorkspace(ctx, contactImports.workspaceId, eq(contactImports.status, 'RUNNING')));
    const limit = ctx.config.importConcurrency;
    if ((running?.n ?? 0) >= limit) {
      throw new AppError(
        429,
        'too_many_imports',
        `This workspace already has ${limit} import${limit === 1 ? '' : 's'} running; start another once one has finished (GET /contacts/imports)`,
        { headers: { 'retry-after': String(TOO_MANY_IMPORTS_RETRY_AFTER) } },
      );
    }
    const [inserted] = await tx.db
      .insert(contactImports)
      .values({ workspaceId: ctx.workspaceId, format: opts.format, mode: opts.mode, bytesTotal: opts.bytesTotal })
      .returning();
    return inserted;
  });
  if (!row) throw new Error('the insert returned no row');
  return jobView(row);
}

/**
 * A row as read from the file, before normalisation: the fields, or why it could not be read.
 * `screened`: its text proved it holds no U+0000, no lone surrogate and no key named `__proto__` or
 * `constructor` (normalizeRow then skips walking it for them).
 */
type SourceRow = { line: number; input: ContactInput; screened?: boolean } | { line: number; error: ImportRowError };

class ImportStop extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Counts bytes as they pass and stops the import when there are more than the policy allows. */
async function* counted(source: AsyncIterable<Buffer | string>, state: { bytes: number }, maxBytes: number): AsyncGenerator<Buffer> {
  for await (const chunk of source) {
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    state.bytes += buf.length;
    if (state.bytes > maxBytes) throw new ImportStop('import_too_large', `The file is larger than the ${maxBytes} bytes an import may be`);
    yield buf;
  }
}

const READ_ONLY_FIELDS = new Set(['id', 'createdAt', 'updatedAt']);
const NDJSON_FIELDS = new Set(['email', 'phone', 'firstName', 'lastName', 'attributes', 'tags']);

function ndjsonRow(line: number, text: string): SourceRow {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { line, error: { line, field: null, reason: 'not valid JSON' } };
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return { line, error: { line, field: null, reason: 'must be a JSON object' } };
  const input: ContactInput = {};
  for (const [key, v] of Object.entries(value as Record<string, unknown>)) {
    if (READ_ONLY_FIELDS.has(key)) continue; // an export's own fields: a round trip imports as is
    if (!NDJSON_FIELDS.has(key)) return { line, error: { line, field: key, reason: 'unknown field' } };
    if (key === 'attributes') {
      if (v === null || typeof v !== 'object' || Array.isArray(v)) return { line, error: { line, field: key, reason: 'must be an object' } };
      input.attributes = v as Record<string, unknown>;
    } else if (key === 'tags') {
      if (!Array.isArray(v) || !v.every((t) => typeof t === 'string')) return { line, error: { line, field: key, reason: 'must be an array of strings' } };
      input.tags = v as string[];
    } else {
      if (v !== null && typeof v !== 'string') return { line, error: { line, field: key, reason: 'must be a string or null' } };
      input[key as 'email' | 'phone' | 'firstName' | 'lastName'] = v as string | null;
    }
  }
  return { line, input, screened: screened(text) };
}

/**
 * True when a row's text (a line of JSON, or a CSV record's) cannot give it U+0000, a lone
 * surrogate or a key `__proto__` or `constructor`: without a backslash it has no escapes, so
 * every key appears in it as it is, and a JSON string can hold U+0000 or a lone surrogate
 * only as an escape (JSON.parse refuses the character itself, and decoded text has no lone
 * surrogate: the decoder writes U+FFFD; a CSV record is also checked for U+0000). Scans of a row's text
 * instead of two walks of every object of every row (a million in an import).
 */
function screened(text: string): boolean {
  return !text.includes('\\') && !text.includes('__proto__') && !text.includes('constructor');
}

/** Why a line or record that is not text is refused, and how to send a file in another encoding. */
function faultReason(fault: RecordFault, format: ImportFormat): string {
  if (fault === 'too_long') return `longer than ${IMPORT_MAX_LINE_BYTES} bytes`;
  const media = format === 'csv' ? 'text/csv' : 'application/x-ndjson';
  return `is not UTF-8 text: a file in another encoding must name it (Content-Type: ${media}; charset=windows-1252, or the CLI's --charset)`;
}

/** NDJSON: one object a line; blank lines are skipped (importReader). */
async function* ndjsonRows(source: AsyncIterable<Buffer>): AsyncGenerator<Piece<SourceRow>> {
  for await (const piece of readNdjsonLines(source, IMPORT_MAX_LINE_BYTES)) {
    yield {
      records: piece.records.map((r) =>
        'fault' in r ? { line: r.line, error: { line: r.line, field: null, reason: faultReason(r.fault, 'ndjson') } } : ndjsonRow(r.line, r.text),
      ),
      readTo: piece.readTo,
    };
  }
}

/** A header's names, lower-cased without spaces, hyphens or underscores; Mailchimp's export names its columns "Email Address" and "Phone Number". */
const CSV_COLUMNS: Record<string, keyof ContactInput | 'attributes' | 'skip'> = {
  email: 'email',
  emailaddress: 'email',
  phone: 'phone',
  phonenumber: 'phone',
  firstname: 'firstName',
  lastname: 'lastName',
  tags: 'tags',
  attributes: 'attributes',
  id: 'skip',
  createdat: 'skip',
  updatedat: 'skip',
};

/**
 * CSV with a header row: email, phone, firstName, lastName, tags (separated by `;`), an
 * `attributes` column of a JSON object (what the export writes), and any other column into
 * `attributes` under its header's name. Empty cells are absent values. Quoted fields may
 * hold commas, quotes and line breaks; a quote inside a field that does not start with one
 * (`12" monitor`, `O"Brien`) is kept as it is, as spreadsheets read it (importReader).
 */
async function* csvRows(source: AsyncIterable<Buffer>): AsyncGenerator<Piece<SourceRow>> {
  let header: { name: string; kind: string }[] | undefined;
  // An attribute takes its name from the header: a row is screened only under a header whose
  // names hold none of what normalizeRow looks for.
  let headerScreened = false;
  try {
    for await (const piece of readCsvRecords(source, IMPORT_MAX_LINE_BYTES)) {
      const rows: SourceRow[] = [];
      for (const record of piece.records) {
        const { line } = record;
        if (!header) {
          if ('notUtf8' in record) throw new ImportStop('invalid_csv', `The CSV header (line ${line}) ${faultReason('not_utf8', 'csv')}`);
          header = csvHeader(record.cells);
          headerScreened = header.every((c) => !c.name.includes('\u0000') && screened(c.name));
          continue;
        }
        if ('notUtf8' in record) {
          const column = header[record.notUtf8];
          const field = !column ? null : column.kind === 'attribute' || column.kind === 'skip' ? column.name || null : column.kind;
          rows.push({ line, error: { line, field, reason: faultReason('not_utf8', 'csv') } });
          continue;
        }
        // Every value of a row is a piece of its text (unquoting drops a field's enclosing quotes
        // and halves doubled ones, so it joins nothing), and so is every key of its JSON
        // attributes cell when the text has no backslash.
        const row = csvRow(line, header, record.cells);
        if (headerScreened && 'input' in row && !record.text.includes('\u0000') && screened(record.text)) row.screened = true;
        rows.push(row);
      }
      yield { records: rows, readTo: piece.readTo };
    }
  } catch (err) {
    // What cannot be told apart into records stops the file as the client's error, never an
    // internal one: the record at fault starts after the last one read.
    if (err instanceof CsvSyntaxError) {
      const where = err.afterLine > 0 ? `after line ${err.afterLine}` : 'from its first line';
      throw new ImportStop('invalid_csv', `The CSV cannot be read ${where}: ${err.message}`);
    }
    throw err;
  }
}

/**
 * The header row's columns, which must include an email or a phone column. Two columns for
 * one field (`email` and `Email`, `firstName` and `first_name`) or for one attribute would
 * leave it to their order which value a contact gets: the file is refused (invalid_csv)
 * before any row is written, naming both columns.
 */
function csvHeader(cells: string[]): { name: string; kind: string }[] {
  const seen = new Map<string, number>();
  const columns = cells.map((cell, i) => {
    const name = cell.trim();
    // Any spelling: case, spaces, hyphens and underscores aside (`First Name`, `first_name`,
    // `E-Mail`).
    const key = name.toLowerCase().replace(/[\s_-]+/g, '');
    // Own names only: `constructor` or `__proto__` is an attribute's name like any other.
    const kind = Object.hasOwn(CSV_COLUMNS, key) ? CSV_COLUMNS[key]! : 'attribute';
    const target = kind === 'attribute' ? `attribute ${name}` : kind;
    const first = seen.get(target);
    if (first !== undefined && kind !== 'skip' && name !== '')
      throw new ImportStop(
        'invalid_csv',
        `The CSV header names ${kind === 'attribute' ? `the attribute "${name}"` : kind} twice (columns ${first + 1} and ${i + 1}): keep one of them`,
      );
    seen.set(target, i);
    return { name, kind };
  });
  // Every row is matched and stored by its email or phone: a header with neither column (say
  // "Mail", or "email;phone" from a spreadsheet that separates with semicolons)
  // could import nothing, so it is refused at once, naming the columns it has.
  if (!columns.some((c) => c.kind === 'email' || c.kind === 'phone')) {
    const names = columns.slice(0, 10).map((c) => JSON.stringify(c.name));
    throw new ImportStop(
      'invalid_csv',
      `The CSV header has no email or phone column (its columns: ${names.join(', ')}${columns.length > 10 ? ', ...' : ''}). ` +
        'Name them email, phone, firstName, lastName, tags, and separate them with commas',
    );
  }
  return columns;
}

/** Sets a property of its own, whatever its name (`__proto__` too, which normalizeRow then refuses, rather than lose it). */
function setOwn(target: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

function csvRow(line: number, header: { name: string; kind: string }[], cells: string[]): SourceRow {
  if (cells.length > header.length) return { line, error: { line, field: null, reason: `has ${cells.length} fields; the header has ${header.length}` } };
  const input: ContactInput = {};
  const attributes: Record<string, unknown> = {};
  let hasAttributes = false;
  for (let i = 0; i < cells.length; i++) {
    const { name, kind } = header[i]!;
    // `'=...`, `'+...`: a value kept as text against spreadsheet formulas (defuse, or a
    // spreadsheet's user): the value is what follows the first apostrophe.
    const cell = FORMULA_ESCAPED.test(cells[i]!) ? cells[i]!.slice(1) : cells[i]!;
    if (cell === '' || kind === 'skip') continue;
    if (kind === 'tags')
      input.tags = cell
        .split(';')
        .map((t) => t.trim())
        .filter((t) => t !== '');
    else if (kind === 'attributes') {
      let parsed: unknown;
      try {
        parsed = JSON.parse(cell);
      } catch {
        parsed = undefined;
      }
      if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
        return { line, error: { line, field: name, reason: 'must be a JSON object' } };
      for (const [key, value] of Object.entries(parsed)) setOwn(attributes, key, value);
      hasAttributes = true;
    } else if (kind === 'attribute') {
      if (name === '') return { line, error: { line, field: null, reason: 'a value under a column without a name' } };
      setOwn(attributes, name, cell);
      hasAttributes = true;
    } else input[kind as 'email' | 'phone' | 'firstName' | 'lastName'] = cell;
  }
  if (hasAttributes) input.attributes = attributes;
  return { line, input };
}

/** A contact as the batch sees it: one already stored, or one this batch creates. */
interface Entry {
  id: number | null;
  email: string | null;
  phone: string | null;
  firstName: string | null;
  lastName: string | null;
  attributes: Record<string, unknown>;
  /** Tag keys it has (stored or added by this batch). */
  tags: Set<string>;
  /** Tags this batch adds: key to name. */
  added: Map<string, string>;
  dirty: boolean;
}

interface BatchResult {
  created: number;
  updated: number;
  skipped: number;
  errors: ImportRowError[];
}

function fieldOf(path: string | undefined): string | null {
  const m = /^\/([^/]+)/.exec(path ?? '');
  return m ? m[1]! : null;
}

/** Normalises like POST /contacts; a row at fault becomes an error, never an exception. */
function normalizeRow(
  ctx: WorkspaceContext,
  row: { line: number; input: ContactInput; screened?: boolean },
): { values: ReturnType<typeof normalizeInput>; tags: string[] } | ImportRowError {
  // As the API refuses it in any JSON body (PostgreSQL text cannot hold it): at its field.
  const bad = row.screened ? undefined : unstorableText(row.input);
  if (bad !== undefined) return { line: row.line, field: fieldOf(bad.at), reason: bad.message };
  const proto = row.screened ? undefined : prototypeKeyPointer(row.input);
  if (proto !== undefined)
    return {
      line: row.line,
      field: fieldOf(proto),
      reason: `must not have a key named ${proto.endsWith('__proto__') ? '"__proto__"' : '"constructor" holding "prototype"'}`,
    };
  try {
    const values = normalizeInput(ctx, row.input);
    if (!values.email && !values.phone) return { line: row.line, field: 'email', reason: 'email or phone is required' };
    const tags = normalizeTags(row.input.tags ?? []);
    return { values, tags };
  } catch (err) {
    if (err instanceof ValidationError) {
      const first = err.errors?.[0];
      return { line: row.line, field: fieldOf(first?.path), reason: first?.message ?? err.message };
    }
    throw err;
  }
}

interface StoredContact {
  id: number;
  email: string | null;
  phone: string | null;
  first_name: string | null;
  last_name: string | null;
  attributes: string;
}

/**
 * PostgreSQL: the contacts' statistics taken afresh, each time an import has doubled the
 * contacts it created (from its first batch on). The planner chooses a batch's lookups
 * (lookupStatement) by them: for a workspace they do not know yet, it read every contact of
 * the workspace for each batch (with `IN (...)`: a million took 509 s) or, with a lookup per
 * value, for each email (the import stalled), until autovacuum's next look. ANALYZE reads a
 * sample of the table (30,000 rows at the default target), so a million-row import pays about
 * ten of them. It waits at most 2 s for a lock (autovacuum working on the table), and failing
 * costs only the plan.
 */
async function refreshStatistics(ctx: WorkspaceContext): Promise<void> {
  try {
    await withTransaction(
      ctx,
      async (tx) => {
        await execute(tx.store, tx.db, sql`SET LOCAL lock_timeout = '2s'`);
        await execute(tx.store, tx.db, sql`ANALYZE contacts`);
      },
      { isolation: 'read committed' },
    );
  } catch {
    // The next doubling tries again.
  }
}

/**
 * PostgreSQL: the entries an import added to the trigram index's pending list (GIN's
 * fastupdate keeps up to 4 MB of new entries unsorted, and every search reads them all) moved
 * into the index proper, as SQLite's search index is compacted after an import. On a million
 * contacts, after renaming 300,000, a search matching nothing took 6.7 ms over a pending list
 * of 431 pages and 0.3 ms once it was moved (65 ms, EXPLAIN ANALYZE); autovacuum would do it
 * only at its next look at the table. Failing costs only that time.
 */
async function flushSearchPendingList(ctx: WorkspaceContext): Promise<void> {
  try {
    await execute(ctx.store, ctx.db, sql`SELECT gin_clean_pending_list('contacts_search_idx')`);
  } catch {
    // Autovacuum does it later.
  }
}

/**
 * The statement that finds which of `values` (emails or phones) the workspace already has, and
 * its parameters (exported so that tests can EXPLAIN it). On PostgreSQL one lookup per value
 * (LIMIT 1 keeps each subquery its own), which the planner takes along the (workspace_id,
 * column) unique index once its statistics know the workspace (refreshStatistics): with
 * `IN (...)` and statistics taken while the workspace was small, it read the whole workspace
 * along the other unique index for every batch (a million through POST /contacts/import: 509 s).
 */
export function lookupStatement(
  dialect: Store['dialect'],
  workspaceId: number,
  column: 'email' | 'phone',
  values: string[],
): { text: string; params: unknown[] } {
  if (dialect === 'pg')
    return {
      text: `SELECT c.id, c.email, c.phone, c.first_name, c.last_name, c.attributes FROM json_array_elements_text(?::json) AS k(v)
               CROSS JOIN LATERAL (SELECT id, email, phone, first_name, last_name, attributes FROM contacts WHERE workspace_id = ? AND ${column} = k.v LIMIT 1) c`,
      params: [JSON.stringify(values), workspaceId],
    };
  return {
    text: `SELECT id, email, phone, first_name, last_name, attributes FROM contacts WHERE workspace_id = ? AND ${column} IN (${values.map(() => '?').join(', ')})`,
    params: [workspaceId, ...values],
  };
}

function chunks<T>(items: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** Rows a segment after a cut takes at most (applySegment). */
const ROWS_AFTER_A_CUT = 64;

/** A row that passed normalisation. */
interface ValidRow {
  line: number;
  values: ReturnType<typeof normalizeInput>;
  attributes: Record<string, unknown> | undefined;
  tags: string[];
}

/**
 * Applies the batch's rows from `from` on, in order, as if one by one, up to a row naming an
 * email or phone that a contact of the segment gave up (a row renamed it): the rows before it
 * are written, and that row is where the next segment starts, its contacts read afresh (and the
 * renamed contact's UPDATE is made before that row's INSERT may take its old email). Without the
 * cut, such a row matched the contact by its old email and undid the rename, and where a batch
 * ended decided the outcome. Returns where the next segment starts (`valid.length`: done).
 */
async function applySegment(
  ctx: WorkspaceContext,
  tx: WorkspaceContext,
  mode: ImportMode,
  valid: ValidRow[],
  from: number,
  result: BatchResult,
): Promise<number> {
  const raw = rawSql(tx.store, tx.db);
  const byEmail = new Map<string, Entry>();
  const byPhone = new Map<string, Entry>();
  // A batch's first segment is all its rows (a cut is rare); after a cut, a few rows at a time,
  // so that a file cut at every row reads each row's contacts a bounded number of times.
  const end = from === 0 ? valid.length : Math.min(valid.length, from + ROWS_AFTER_A_CUT);
  const rows = valid.slice(from, end);
  const emails = [...new Set(rows.map((r) => r.values.email).filter((e): e is string => !!e))];
  const phones = [...new Set(rows.map((r) => r.values.phone).filter((p): p is string => !!p))];
  const load = async (column: 'email' | 'phone', values: string[]) => {
    for (const part of chunks(values, 500)) {
      const { text, params } = lookupStatement(tx.store.dialect, ctx.workspaceId, column, part);
      const found = await raw.all<StoredContact>(text, params);
      for (const c of found) {
        const entry = (c.email ? byEmail.get(c.email) : undefined) ??
          (c.phone ? byPhone.get(c.phone) : undefined) ?? {
            id: c.id,
            email: c.email,
            phone: c.phone,
            firstName: c.first_name,
            lastName: c.last_name,
            attributes: JSON.parse(c.attributes) as Record<string, unknown>,
            tags: new Set<string>(),
            added: new Map<string, string>(),
            dirty: false,
          };
        if (c.email) byEmail.set(c.email, entry);
        if (c.phone) byPhone.set(c.phone, entry);
      }
    }
  };
  await load('email', emails);
  await load('phone', phones);
  const loaded = new Map<number, Entry>();
  for (const e of [...byEmail.values(), ...byPhone.values()]) loaded.set(e.id!, e);
  for (const part of chunks([...loaded.keys()], 500)) {
    const tags = await raw.all<{ contact_id: number; tag_key: string }>(
      `SELECT contact_id, tag_key FROM contact_tags WHERE contact_id IN (${part.map(() => '?').join(', ')})`,
      part,
    );
    for (const t of tags) loaded.get(t.contact_id)!.tags.add(t.tag_key);
  }

  const created: Entry[] = [];
  // The emails and phones that contacts of this segment gave up (renamed).
  const releasedEmails = new Set<string>();
  const releasedPhones = new Set<string>();
  let stop = end;
  for (let i = from; i < end; i++) {
    const row = valid[i]!;
    const { email, phone } = row.values;
    if ((email && releasedEmails.has(email)) || (phone && releasedPhones.has(phone))) {
      stop = i;
      break;
    }
    const e1 = email ? byEmail.get(email) : undefined;
    const e2 = phone ? byPhone.get(phone) : undefined;
    if (e1 && e2 && e1 !== e2) {
      result.errors.push({ line: row.line, field: 'phone', reason: `belongs to another contact${e2.id ? ` (id ${e2.id})` : ' earlier in the file'}` });
      continue;
    }
    const target = e1 ?? e2;
    if (!target) {
      if (mode === 'update') {
        result.skipped++;
        continue;
      }
      const attributes = withoutNulls(row.attributes ?? {});
      const entry: Entry = {
        id: null,
        email: email ?? null,
        phone: phone ?? null,
        firstName: row.values.firstName ?? null,
        lastName: row.values.lastName ?? null,
        attributes,
        tags: new Set(row.tags.map((t) => t.toLowerCase())),
        added: new Map(row.tags.map((t) => [t.toLowerCase(), t])),
        dirty: true,
      };
      if (entry.tags.size > MAX_TAGS_PER_CONTACT) {
        result.errors.push({ line: row.line, field: 'tags', reason: TOO_MANY_TAGS });
        continue;
      }
      if (Buffer.byteLength(JSON.stringify(attributes)) > ATTRIBUTES_MAX_BYTES) {
        result.errors.push({ line: row.line, field: 'attributes', reason: `must be at most ${ATTRIBUTES_MAX_BYTES} bytes of JSON` });
        continue;
      }
      if (entry.email) byEmail.set(entry.email, entry);
      if (entry.phone) byPhone.set(entry.phone, entry);
      created.push(entry);
      result.created++;
      continue;
    }
    if (mode === 'create') {
      result.skipped++;
      continue;
    }
    // Merge like PATCH /contacts/:id: given fields replace, attributes merge one level
    // deep (null removes a key), tags are added. Worked out first and applied only when the
    // row passes every check: a row refused changes nothing.
    const next = {
      email: email ?? target.email,
      phone: phone ?? target.phone,
      firstName: row.values.firstName !== undefined ? row.values.firstName : target.firstName,
      lastName: row.values.lastName !== undefined ? row.values.lastName : target.lastName,
    };
    if (!next.email && !next.phone) {
      result.errors.push({ line: row.line, field: 'email', reason: 'email or phone is required' });
      continue;
    }
    let attributes = target.attributes;
    if (row.attributes) {
      const merged = { ...target.attributes };
      for (const [k, v] of Object.entries(row.attributes)) {
        if (v === null) delete merged[k];
        else merged[k] = v;
      }
      if (Buffer.byteLength(JSON.stringify(merged)) > ATTRIBUTES_MAX_BYTES) {
        result.errors.push({ line: row.line, field: 'attributes', reason: `must be at most ${ATTRIBUTES_MAX_BYTES} bytes of JSON` });
        continue;
      }
      if (JSON.stringify(merged) !== JSON.stringify(target.attributes)) attributes = merged;
    }
    const newTags = row.tags.filter((t) => !target.tags.has(t.toLowerCase()));
    if (target.tags.size + newTags.length > MAX_TAGS_PER_CONTACT) {
      result.errors.push({ line: row.line, field: 'tags', reason: TOO_MANY_TAGS });
      continue;
    }
    let changed = attributes !== target.attributes || newTags.length > 0;
    if (target.email && next.email !== target.email) {
      byEmail.delete(target.email);
      releasedEmails.add(target.email);
    }
    if (target.phone && next.phone !== target.phone) {
      byPhone.delete(target.phone);
      releasedPhones.add(target.phone);
    }
    for (const key of ['email', 'phone', 'firstName', 'lastName'] as const) {
      if (next[key] !== target[key]) {
        target[key] = next[key];
        changed = true;
      }
    }
    target.attributes = attributes;
    for (const t of newTags) {
      target.tags.add(t.toLowerCase());
      target.added.set(t.toLowerCase(), t);
    }
    if (target.email) byEmail.set(target.email, target);
    if (target.phone) byPhone.set(target.phone, target);
    if (changed) {
      target.dirty = true;
      result.updated++;
    } else result.skipped++;
  }

  const at = nowIso();
  const insertSql = (k: number) =>
    `INSERT INTO contacts (workspace_id, email, phone, first_name, last_name, attributes, created_at, updated_at) VALUES ${Array(k).fill('(?, ?, ?, ?, ?, ?, ?, ?)').join(', ')} RETURNING id, email, phone`;
  for (const part of chunks(created, ROWS_PER_INSERT)) {
    const args: unknown[] = [];
    for (const c of part) args.push(ctx.workspaceId, c.email, c.phone, c.firstName, c.lastName, JSON.stringify(c.attributes), at, at);
    const ids = await raw.all<{ id: number; email: string | null; phone: string | null }>(insertSql(part.length), args);
    // Every new contact has an email or a phone, each unique in the workspace: that finds it.
    for (const r of ids) (r.email ? byEmail.get(r.email) : byPhone.get(r.phone!))!.id = r.id;
  }
  const createdIds = new Set(created.map((e) => e.id));
  const tagRows: [number, string, string][] = [];
  const updated: Entry[] = [];
  const seen = new Set<Entry>();
  for (const entry of [...byEmail.values(), ...byPhone.values()]) {
    if (seen.has(entry) || !entry.dirty) continue;
    seen.add(entry);
    if (entry.id !== null && !createdIds.has(entry.id)) updated.push(entry);
    for (const [key, name] of entry.added) tagRows.push([entry.id!, key, name]);
  }
  const values = (e: Entry) => [e.email, e.phone, e.firstName, e.lastName, JSON.stringify(e.attributes)];
  if (tx.store.dialect === 'sqlite') {
    // The batch's updates in one statement (UPDATE ... FROM VALUES), as its inserts: the
    // search index's trigger then writes one segment for them all, not one per row, and
    // SQLite starts one statement (journal, trigger program) instead of 2,000. The triggers
    // still run row by row.
    const updateSql = (k: number) =>
      `UPDATE contacts SET email = v.column2, phone = v.column3, first_name = v.column4, last_name = v.column5, attributes = v.column6, updated_at = ? FROM (VALUES ${Array(k).fill('(?, ?, ?, ?, ?, ?)').join(', ')}) AS v WHERE contacts.id = v.column1 AND contacts.workspace_id = ?`;
    for (const part of chunks(updated, ROWS_PER_UPDATE)) {
      const args: unknown[] = [at];
      for (const e of part) args.push(e.id, ...values(e));
      args.push(ctx.workspaceId);
      await raw.run(updateSql(part.length), args);
    }
  } else {
    // PostgreSQL: the rows as one JSON parameter, read back as typed columns, so that no
    // value needs a cast in VALUES. A statement per row (a round trip each) had renamed a
    // million contacts in 483 s (bench:scale on PostgreSQL).
    const update = `UPDATE contacts AS c SET email = v.email, phone = v.phone, first_name = v.first_name, last_name = v.last_name, attributes = v.attributes, updated_at = ?
      FROM json_to_recordset(?::json) AS v(id bigint, email text, phone text, first_name text, last_name text, attributes json)
      WHERE c.id = v.id AND c.workspace_id = ?`;
    for (const part of chunks(updated, ROWS_PER_UPDATE)) {
      const rows = part.map((e) => ({ id: e.id, email: e.email, phone: e.phone, first_name: e.firstName, last_name: e.lastName, attributes: e.attributes }));
      await raw.run(update, [at, JSON.stringify(rows), ctx.workspaceId]);
    }
  }
  const tagSql = (k: number) =>
    `INSERT INTO contact_tags (contact_id, workspace_id, tag_key, name, created_at) VALUES ${Array(k).fill('(?, ?, ?, ?, ?)').join(', ')} ON CONFLICT DO NOTHING`;
  for (const part of chunks(tagRows, ROWS_PER_INSERT)) {
    const args: unknown[] = [];
    for (const [id, key, name] of part) args.push(id, ctx.workspaceId, key, name, at);
    await raw.run(tagSql(part.length), args);
  }
  return stop;
}

/**
 * One batch in one transaction: finds the contacts the rows name (by email, then phone),
 * applies the mode, writes new contacts in multi-row inserts, changed ones one by one, and
 * the tags; the job's counts are written in the same transaction.
 */
async function applyBatch(
  ctx: WorkspaceContext,
  jobId: number,
  mode: ImportMode,
  rows: SourceRow[],
  progress: { lines: number; bytes: number },
): Promise<BatchResult> {
  const unreadable: ImportRowError[] = [];
  const valid: ValidRow[] = [];
  for (const row of rows) {
    if ('error' in row) {
      unreadable.push(row.error);
      continue;
    }
    const n = normalizeRow(ctx, row);
    if ('reason' in n) unreadable.push(n);
    else valid.push({ line: row.line, values: n.values, attributes: row.input.attributes, tags: n.tags });
  }

  // The batch's statements are written by hand (multi-row inserts): on SQLite prepared once
  // and run synchronously on the transaction's connection (the writer), on PostgreSQL awaited.
  return withTransaction(ctx, async (tx) => {
    // Counted afresh by each try: PostgreSQL runs this body again after a conflict.
    const result: BatchResult = { created: 0, updated: 0, skipped: 0, errors: [...unreadable] };
    for (let from = 0; from < valid.length; ) from = await applySegment(ctx, tx, mode, valid, from, result);
    await saveProgress(tx, jobId, result, progress);
    return result;
  });
}

/**
 * A batch, or when others keep writing the contacts it names (on PostgreSQL: the API or a
 * webhook creating one of its emails between its read and its insert, more often than the
 * store retries), its halves, each in a transaction of its own, down to single rows, which
 * read the other writer's contact and update or skip it. Each part saves its own progress.
 */
async function applyRows(
  ctx: WorkspaceContext,
  jobId: number,
  mode: ImportMode,
  rows: SourceRow[],
  progress: { lines: number; bytes: number },
): Promise<BatchResult> {
  try {
    return await applyBatch(ctx, jobId, mode, rows, progress);
  } catch (err) {
    if (rows.length < 2 || !isWriteConflict(err)) throw err;
    const half = Math.ceil(rows.length / 2);
    const first = await applyRows(ctx, jobId, mode, rows.slice(0, half), { ...progress, lines: rows[half - 1]!.line });
    const second = await applyRows(ctx, jobId, mode, rows.slice(half), progress);
    return {
      created: first.created + second.created,
      updated: first.updated + second.updated,
      skipped: first.skipped + second.skipped,
      errors: [...first.errors, ...second.errors],
    };
  }
}

/** Adds a batch's counts to the job (inside the batch's transaction). */
async function saveProgress(tx: WorkspaceContext, jobId: number, batch: BatchResult, progress: { lines: number; bytes: number }): Promise<void> {
  const [job] = await tx.db
    .select({ errors: contactImports.errors, errorCount: contactImports.errorCount })
    .from(contactImports)
    .where(eq(contactImports.id, jobId));
  if (!job) throw new NotFoundError('import_not_found', `No import with id ${jobId}`);
  // The first errors by line, whatever the order they were found in: a batch finds the rows it
  // cannot read or normalise before those its contacts refuse (a phone of another contact).
  const errors = batch.errors.length ? [...job.errors, ...batch.errors].sort((a, b) => a.line - b.line).slice(0, IMPORT_ERRORS_KEPT) : job.errors;
  const at = nowIso();
  await rawSql(tx.store, tx.db).run(
    'UPDATE contact_imports SET created = created + ?, updated = updated + ?, skipped = skipped + ?, error_count = error_count + ?, errors = ?, lines = ?, bytes_read = ?, updated_at = ?, heartbeat_at = ? WHERE id = ?',
    [batch.created, batch.updated, batch.skipped, batch.errors.length, JSON.stringify(errors), progress.lines, progress.bytes, at, at, jobId],
  );
}

export interface RunImportHooks {
  /** Told of an unexpected error that stopped the import (the job then says FAILED `import_failed`). */
  onError?: (err: unknown) => void;
  /**
   * Aborted when the server shuts down: whatever the reading then fails with, the job ends
   * FAILED `interrupted` with what its finished batches committed.
   */
  signal?: AbortSignal;
  /** Told after every committed batch (the CLI draws its progress bar from it). */
  onProgress?: (job: {
    lines: number;
    bytesRead: number;
    bytesTotal: number | null;
    created: number;
    updated: number;
    skipped: number;
    errorCount: number;
  }) => void;
}

/**
 * Reads the file (a stream of bytes, never held whole) into the job, committing every
 * IMPORT_BATCH_ROWS rows, or the rows read so far when PROGRESS_MS pass without a batch
 * filling. When the stream fails (the client went away) the batch not yet
 * committed is dropped, so nothing half-read is written, and the job says FAILED with the
 * rows committed before. Resolves with the finished job, also when it failed.
 */
export async function runImport(
  ctx: WorkspaceContext,
  jobId: number,
  source: AsyncIterable<Buffer | string>,
  opts: ImportOptions,
  hooks: RunImportHooks = {},
): Promise<ImportJobView> {
  const bytes = { bytes: 0 };
  const totals = { created: 0, updated: 0, skipped: 0, errorCount: 0 };
  const heartbeat = setInterval(() => {
    const beat = withTransaction(ctx, async (tx) => {
      await tx.db.update(contactImports).set({ heartbeatAt: nowIso() }).where(eq(contactImports.id, jobId));
    });
    // Not awaited: a timer has no one to tell. A failed beat (a busy database) is made up
    // for by the next batch, which writes it too.
    void beat.catch(() => undefined);
  }, HEARTBEAT_MS);
  heartbeat.unref();
  // A bigger page cache on the connection the batches write through while the import runs
  // (they touch the same index pages again and again); restored at the end. 16 MiB keeps a
  // million-row import under 300 MB.
  const sqlite = isSqliteStore(ctx.store) ? ctx.store : undefined;
  const cacheBefore = await sqlite?.exclusive((w) => {
    const before = w.$client.pragma('cache_size', { simple: true }) as number;
    if (before > -IMPORT_CACHE_KIB && before < IMPORT_CACHE_KIB) w.$client.pragma(`cache_size = -${IMPORT_CACHE_KIB}`);
    return before;
  });
  // The limit counts the bytes received; a file in another encoding is then decoded to UTF-8.
  const input = utf8Bytes(counted(source, bytes, opts.maxBytes), opts.charset);
  const pieces = opts.format === 'csv' ? csvRows(input) : ndjsonRows(input);
  let batch: SourceRow[] = [];
  let analyzeAt = IMPORT_BATCH_ROWS;
  let savedAt = Date.now();
  /** Commits the batch; `lines`: every row starting on or before it is then committed. */
  let savedTo = 0;
  const flush = async (lines: number) => {
    const r = await applyRows(ctx, jobId, opts.mode, batch, { lines, bytes: bytes.bytes });
    batch = [];
    savedAt = Date.now();
    savedTo = lines;
    if (ctx.store.dialect === 'pg' && totals.created + r.created >= analyzeAt) {
      analyzeAt = 2 * (totals.created + r.created);
      await refreshStatistics(ctx);
    }
    totals.created += r.created;
    totals.updated += r.updated;
    totals.skipped += r.skipped;
    totals.errorCount += r.errors.length;
    hooks.onProgress?.({ lines, bytesRead: bytes.bytes, bytesTotal: opts.bytesTotal, ...totals });
    await yieldToLoop();
  };
  let failure: { code: string; detail: string } | null = null;
  let readTo = 0;
  const reading = pieces[Symbol.asyncIterator]();
  // Whether the fault came from reading the file (a cut upload, damaged gzip...) rather than
  // from writing a batch (a database error, which may also say ECONNRESET on PostgreSQL).
  let readFault = false;
  const read = (): Promise<IteratorResult<Piece<SourceRow>>> =>
    reading.next().catch((err: unknown) => {
      readFault = true;
      throw err;
    });
  try {
    for (;;) {
      const next = read();
      // A file that has not filled a batch for a while (a slow upload, few rows between blank
      // lines, or an upload that stalls) commits what it has whole, and so says how far it has
      // been read, also while no byte comes.
      let step = await within(next, PROGRESS_MS - (Date.now() - savedAt));
      while (step === undefined) {
        // Nothing new since the last commit: the heartbeat alone says the job is alive.
        if (batch.length || readTo > savedTo) await flush(readTo);
        else savedAt = Date.now();
        step = await within(next, PROGRESS_MS);
      }
      if (step.done) break;
      for (const row of step.value.records) {
        batch.push(row);
        if (batch.length >= IMPORT_BATCH_ROWS) await flush(row.line);
      }
      readTo = step.value.readTo;
      if (Date.now() - savedAt >= PROGRESS_MS) await flush(readTo);
    }
    await flush(readTo);
  } catch (err) {
    // The rows read whole before the fault (a cut upload, damaged gzip, a CSV that cannot be
    // read on, the size limit) are committed with it: every row in the batch ended before
    // readTo, and none is half-read. Not at shutdown (interrupted), nor after an internal error.
    if (readFault && !hooks.signal?.aborted && (err instanceof ImportStop || isAbort(err)) && batch.length) {
      try {
        await flush(readTo);
      } catch {
        // The fault is what the job reports; what could not be committed is not counted.
      }
    }
    if (hooks.signal?.aborted) failure = { code: 'interrupted', detail: 'The server shut down before the end of the file; the counts are what was committed' };
    else if (err instanceof ImportStop) failure = { code: err.code, detail: err.message };
    else if (readFault && isAbort(err))
      failure = { code: 'client_disconnected', detail: 'The upload ended before the end of the file; the rows received whole before were imported' };
    else {
      failure = { code: 'import_failed', detail: 'The import stopped on an internal error; the counts are what was committed' };
      hooks.onError?.(err);
    }
  } finally {
    // Rows changed by the import (names, emails, phones) left tombstones in the search index:
    // many of them are compacted away before the job is reported done, so that searches do
    // not step over one for every contact it changed (searchIndex.ts). Also after a failure:
    // what was committed stays.
    // The job goes on beating meanwhile (a large index takes a while), so it is never taken
    // for one whose process stopped.
    if (sqlite && !hooks.signal?.aborted) {
      try {
        await compactSearchIndex(sqlite, { stop: () => hooks.signal?.aborted === true });
      } catch (err) {
        hooks.onError?.(err);
      }
    } else if (ctx.store.dialect === 'pg' && !hooks.signal?.aborted) {
      await flushSearchPendingList(ctx);
    }
    clearInterval(heartbeat);
    // A write that failed while a read was pending leaves the reader suspended: ended (once
    // that read settles), so that its streams are closed, as a for-await loop would.
    void reading.return(undefined).catch(() => undefined);
    await sqlite?.exclusive((w) => w.$client.pragma(`cache_size = ${cacheBefore}`));
  }
  return finish(ctx, jobId, failure, bytes.bytes);
}

/** The promise's value, or undefined when `ms` pass first (the promise goes on). */
function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  if (ms <= 0) return Promise.race([promise, Promise.resolve(undefined)]);
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(resolve, ms, undefined);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function isAbort(err: unknown): boolean {
  const code = (err as { code?: string }).code;
  return code === 'ECONNRESET' || code === 'ERR_STREAM_PREMATURE_CLOSE' || code === 'ABORT_ERR' || (err as Error).message === 'aborted';
}

function finish(ctx: WorkspaceContext, jobId: number, failure: { code: string; detail: string } | null, bytesRead: number): Promise<ImportJobView> {
  return withTransaction(ctx, async (tx) => {
    const at = nowIso();
    const [row] = await tx.db
      .update(contactImports)
      .set({
        status: failure ? 'FAILED' : 'COMPLETED',
        failureCode: failure?.code ?? null,
        failureDetail: failure?.detail ?? null,
        bytesRead,
        finishedAt: at,
        updatedAt: at,
        heartbeatAt: at,
      })
      .where(eq(contactImports.id, jobId))
      .returning();
    if (!row) throw new NotFoundError('import_not_found', `No import with id ${jobId}`);
    await recordAudit(tx, {
      workspaceId: ctx.workspaceId,
      action: 'contact.imported',
      target: { type: 'contact_import', id: jobId },
      metadata: {
        status: row.status,
        format: row.format,
        mode: row.mode,
        created: row.created,
        updated: row.updated,
        skipped: row.skipped,
        errorCount: row.errorCount,
      },
    });
    return jobView(row);
  });
}

/** Whole import in one call (the CLI and small HTTP uploads). */
export async function importContacts(
  ctx: WorkspaceContext,
  source: AsyncIterable<Buffer | string>,
  opts: ImportOptions,
  hooks: RunImportHooks = {},
): Promise<ImportJobView> {
  const job = await startImport(ctx, opts);
  return runImport(ctx, job.id, source, opts, hooks);
}

/** Whether bytes begin as a gzip stream does (RFC 1952: 1f 8b). */
export function isGzip(head: Uint8Array): boolean {
  return head.length >= 2 && head[0] === 0x1f && head[1] === 0x8b;
}

/**
 * The source as it is, or decompressed as it streams when it begins as gzip does (a
 * `contacts.csv.gz` exported from another system): told apart by its first bytes, not its
 * name. The import's byte limit then counts the decompressed bytes, so a small file that
 * inflates without end is stopped like any file too large. A corrupt or cut-off gzip stream
 * stops the import FAILED `invalid_gzip`, the rows before it committed; so does a source
 * `required` to be gzip (sent with Content-Encoding: gzip) that is not.
 */
export async function* decompressIfGzip(source: AsyncIterable<Buffer | string>, opts: { required?: boolean } = {}): AsyncGenerator<Buffer | string> {
  const iterator = source[Symbol.asyncIterator]();
  const first = await iterator.next();
  // An empty body declared gzip is not gzip either (an empty file compressed is 20 bytes).
  if (first.done) {
    if (opts.required) throw new ImportStop('invalid_gzip', 'The body is declared gzip-compressed (Content-Encoding: gzip) but is empty');
    return;
  }
  const rest = { [Symbol.asyncIterator]: () => iterator };
  if (typeof first.value === 'string' || !isGzip(first.value)) {
    // Declared gzip (Content-Encoding) and not: refused rather than read as it is.
    if (opts.required) throw new ImportStop('invalid_gzip', 'The body is declared gzip-compressed (Content-Encoding: gzip) but is not');
    yield first.value;
    yield* rest;
    return;
  }
  const gunzip = createGunzip();
  const feeding = pipeline(
    (async function* () {
      yield first.value;
      yield* rest;
    })(),
    gunzip,
  );
  // Reported through the loop below, where the decompressed stream fails with it.
  feeding.catch(() => {});
  try {
    for await (const chunk of gunzip) yield chunk as Buffer;
    await feeding;
  } catch (err) {
    const code = (err as { code?: string }).code ?? '';
    if (code.startsWith('Z_') || code === 'ERR_STREAM_PREMATURE_CLOSE')
      throw new ImportStop('invalid_gzip', 'The file is gzip-compressed but corrupt or cut short; the rows before the damage were imported');
    throw err;
  }
}

export type ExportFormat = 'ndjson' | 'csv';

export const EXPORT_CSV_COLUMNS = ['id', 'email', 'phone', 'firstName', 'lastName', 'tags', 'attributes', 'createdAt', 'updatedAt'] as const;

/**
 * Spreadsheets run a cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return as a
 * formula (CSV injection): a contact's name or email can come from a webhook's sender, and
 * `=HYPERLINK(...)` would run on the machine of whoever opens the export. Such a cell is written
 * with a leading `'`, which spreadsheets take as "text" and do not show. A plain signed number
 * (an E.164 phone) is left as it is: as a formula it is only that number. A cell of apostrophes
 * then one of those characters gets one more `'`, so that the import, which takes one `'` off
 * such a cell (csvRow), gives back exactly what was stored.
 */
const FORMULA_START = /^'*[=+\-@\t\r]/;
const SIGNED_NUMBER = /^[+-]\d+$/;
/** A cell written by defuse (or by hand in a spreadsheet) to keep a leading formula character as text. */
const FORMULA_ESCAPED = /^'+[=+\-@\t\r]/;

function defuse(value: string | null): string | null {
  return value !== null && FORMULA_START.test(value) && !SIGNED_NUMBER.test(value) ? `'${value}` : value;
}

/**
 * A CSV cell, quoted when it holds a quote, a line break, a comma or a semicolon: a spreadsheet
 * in a locale that separates columns with ";" would otherwise split `x;=1+2` and run the
 * second part as a formula.
 */
function csvCell(value: string | null): string {
  if (value === null) return '';
  return /[",;\r\n]/.test(value) || value !== value.trim() ? `"${value.replace(/"/g, '""')}"` : value;
}

function csvLine(c: ContactView): string {
  return [
    String(c.id),
    csvCell(defuse(c.email)),
    csvCell(defuse(c.phone)),
    csvCell(defuse(c.firstName)),
    csvCell(defuse(c.lastName)),
    csvCell(defuse(c.tags.join(';'))),
    csvCell(Object.keys(c.attributes).length ? JSON.stringify(c.attributes) : ''),
    c.createdAt,
    c.updatedAt,
  ].join(',');
}

/**
 * The workspace's contacts (with the list's filters), newest first, as NDJSON lines or CSV
 * (a header row, tags joined with `;`, attributes as a JSON object): chunks of a page each,
 * read in keyset pages, so memory stays the same for ten contacts or a million. Both
 * formats import back as they are. `counted` is told each chunk's contacts before it is yielded.
 */
export async function* exportContacts(
  ctx: WorkspaceContext,
  format: ExportFormat,
  filter: Omit<ContactFilter, 'limit' | 'cursor'>,
  counted?: (contacts: number) => void,
): AsyncGenerator<string> {
  if (format === 'csv') yield `${EXPORT_CSV_COLUMNS.join(',')}\r\n`;
  for await (const page of iterateContacts(ctx, filter, 1000)) {
    counted?.(page.length);
    yield format === 'csv' ? page.map((c) => `${csvLine(c)}\r\n`).join('') : page.map((c) => `${JSON.stringify(c)}\n`).join('');
    await yieldToLoop();
  }
}
