import { BadRequestError } from './errors.js';

export const DEFAULT_LIMIT = 50;
export const MAX_LIMIT = 200;
/**
 * The most row data one page holds, whatever its limit: a page stops early (with a
 * nextCursor) rather than build 200 one-MiB bodies in memory. A page always has one row.
 */
export const MAX_PAGE_BYTES = 2 * 1024 * 1024;

/**
 * The most rows of its driving index a page examines when further filters are checked on each
 * of them (a contact search beside a tag, the runs of a workflow in one status). Without a
 * bound, a filter that matches few of the driver's rows walked all of them for one page, on
 * the thread that answers every request. A page that has examined this many ends early,
 * short or even empty, with a nextCursor past them: every match is still found, in order.
 */
export const LIST_SCAN_ROWS = 10_000;

/** About how many bytes a row takes in an answer: its strings, buffers and JSON values. */
export function approximateSize(row: Record<string, unknown>): number {
  let n = 16;
  for (const v of Object.values(row)) {
    if (typeof v === 'string') n += v.length + 8;
    else if (Buffer.isBuffer(v))
      n += v.length * 2; // a body is answered as JSON or text, often escaped
    else if (v !== null && typeof v === 'object') n += JSON.stringify(v).length + 8;
    else n += 16;
  }
  return n;
}

/**
 * Reads one page's rows in chunks sized by the largest row seen so far, so that a page of big
 * rows stops at MAX_PAGE_BYTES without reading the rest, and a page of small rows takes one or
 * two queries. `read(last, chunk)` answers up to `chunk` rows after `last` (undefined: from the
 * page's start), in the list's order. Answers the rows and the limit to page them by: limit+1
 * rows when there are more, or, over the budget, the rows that fit and the first that did not.
 */
export async function readWithinBudget<T>(limit: number, read: (last: T | undefined, chunk: number) => Promise<T[]>): Promise<{ rows: T[]; limit: number }> {
  const rows: T[] = [];
  let bytes = 0;
  let largest = 0; // the largest row seen; before any, a first chunk of 8 rows
  for (;;) {
    const want = limit + 1 - rows.length;
    const chunk = largest === 0 ? Math.min(want, 8) : Math.max(1, Math.min(want, Math.floor((MAX_PAGE_BYTES - bytes) / largest)));
    const got = await read(rows[rows.length - 1], chunk);
    for (const row of got) {
      const size = approximateSize(row as Record<string, unknown>);
      largest = Math.max(largest, size);
      // Over the budget: this row starts the next page (the page keeps at least one row).
      if (rows.length > 0 && bytes + size > MAX_PAGE_BYTES) return { rows: [...rows, row], limit: rows.length };
      bytes += size;
      rows.push(row);
    }
    if (got.length < chunk || rows.length > limit) return { rows, limit };
  }
}

export interface Page<T> {
  data: T[];
  nextCursor: string | null;
}

/** Cursors are opaque to clients: base64url of the last id seen, with a version tag. */
export function encodeCursor(lastId: number): string {
  return Buffer.from(`v1:${lastId}`).toString('base64url');
}

export function decodeCursor(cursor: string | undefined): number | undefined {
  if (cursor === undefined || cursor === '') return undefined;
  const text = /^[A-Za-z0-9_-]{1,64}$/.test(cursor) ? Buffer.from(cursor, 'base64url').toString('utf8') : '';
  const match = /^v1:([1-9][0-9]{0,15})$/.exec(text);
  // Ids are safe integers (as the id filters are): 9999999999999999 would read as 10^16.
  if (!match || !Number.isSafeInteger(Number(match[1]))) throw new BadRequestError('invalid_cursor', 'The cursor is not one this server issued');
  return Number(match[1]);
}

/**
 * Takes limit+1 rows (newest first) and turns them into a page. `beyond`: the page read a
 * window of LIST_SCAN_ROWS that ends above this id; when it did not fill, the next page goes
 * on past the window (a cursor is the id the next page reads below).
 */
export function toPage<T extends { id: number }, R>(rows: T[], limit: number, shape: (row: T) => R, beyond: number | null = null): Page<R> {
  const more = rows.length > limit;
  const pageRows = more ? rows.slice(0, limit) : rows;
  const last = pageRows[pageRows.length - 1];
  const nextCursor = more && last ? encodeCursor(last.id) : beyond !== null ? encodeCursor(beyond + 1) : null;
  return { data: pageRows.map(shape), nextCursor };
}
