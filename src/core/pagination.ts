import { BadRequestError } from './errors.js';

export const DEFAULT_LIMIT = 50;
export const MAX_LIMIT = 200;

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
  if (!match) throw new BadRequestError('invalid_cursor', 'The cursor is not one this server issued');
  return Number(match[1]);
}

/** Takes limit+1 rows (newest first) and turns them into a page. */
export function toPage<T extends { id: number }, R>(rows: T[], limit: number, shape: (row: T) => R): Page<R> {
  const more = rows.length > limit;
  const pageRows = more ? rows.slice(0, limit) : rows;
  const last = pageRows[pageRows.length - 1];
  return { data: pageRows.map(shape), nextCursor: more && last ? encodeCursor(last.id) : null };
}
