/**
 * An import file's bytes read as text (contactImport.ts makes rows of it): NDJSON lines and CSV
 * records, each numbered as an editor numbers its lines, each checked on its own to be UTF-8
 * (bytes that are not are that record's fault, not the file's), with no more than one record
 * held at a time, blank lines never held at all. Each chunk read gives a piece: the records it
 * completed and the line the file has been read to, so that a file of blank lines, which holds
 * no record, still shows how far it has been read.
 */
import { isUtf8 } from 'node:buffer';

const LF = 0x0a;
const CR = 0x0d;
const QUOTE = 0x22;
const COMMA = 0x2c;

/** What one chunk of the file gave: the records it completed, in order, and the last line read whole. */
export interface Piece<T> {
  records: T[];
  /** Every line up to this one has been read, its records (if any) given. */
  readTo: number;
}

/** Why a record could not be read as text. */
export type RecordFault = 'too_long' | 'not_utf8';

export type NdjsonLine = { line: number; text: string } | { line: number; fault: RecordFault };

/** A CSV record: its cells and its text, or `notUtf8`: the first cell whose bytes are not UTF-8 (-1: no one cell's alone). */
export type CsvRecord = { line: number; cells: string[]; text: string } | { line: number; notUtf8: number };

/** A CSV that cannot be read on: `afterLine` is the line the last record read ends on (0: none). */
export class CsvSyntaxError extends Error {
  constructor(
    readonly afterLine: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * The file's bytes as UTF-8: decoded from the encoding its Content-Type names, or else as they
 * are, without a BOM. A BOM says the encoding whatever the label: UTF-16 (what spreadsheets
 * write as "Unicode text") is decoded, UTF-8 read as it is; what an encoding cannot decode
 * becomes U+FFFD.
 */
export async function* utf8Bytes(source: AsyncIterable<Buffer>, charset: string | undefined): AsyncGenerator<Buffer> {
  // A byte order mark says the encoding whatever the label (WHATWG's decode: the BOM wins).
  const iterator = source[Symbol.asyncIterator]();
  let head: Buffer = Buffer.alloc(0);
  while (head.length < 3) {
    const next = await iterator.next();
    if (next.done) break;
    head = head.length ? Buffer.concat([head, next.value]) : next.value;
  }
  let encoding: string | undefined = charset;
  if (head[0] === 0xff && head[1] === 0xfe) encoding = 'utf-16le';
  else if (head[0] === 0xfe && head[1] === 0xff) encoding = 'utf-16be';
  else if (head[0] === 0xef && head[1] === 0xbb && head[2] === 0xbf) {
    head = head.subarray(3);
    encoding = undefined;
  }
  const whole = (async function* () {
    if (head.length) yield head;
    yield* { [Symbol.asyncIterator]: () => iterator };
  })();
  yield* encoding ? decoded(whole, encoding) : whole;
}

async function* decoded(source: AsyncIterable<Buffer>, charset: string): AsyncGenerator<Buffer> {
  const decoder = new TextDecoder(charset);
  for await (const chunk of source) {
    const text = decoder.decode(chunk, { stream: true });
    if (text) yield Buffer.from(text);
  }
  const rest = decoder.decode();
  if (rest) yield Buffer.from(rest);
}

/**
 * Whether the whole characters of a chunk are UTF-8: one check for the records that lie in it,
 * rather than one each. A character cut by the chunk's end (or, when `continued`, the rest of one
 * at its start) belongs to a record that spans chunks, which is checked whole on its own.
 */
function wholeCharsAreUtf8(chunk: Buffer, continued: boolean): boolean {
  let from = 0;
  if (continued) while (from < 3 && from < chunk.length && (chunk[from]! & 0xc0) === 0x80) from++;
  let to = chunk.length;
  for (let back = 1; back <= 3 && to - back >= from; back++) {
    const b = chunk[to - back]!;
    if ((b & 0xc0) === 0x80) continue;
    const needs = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    if (needs > back) to -= back;
    break;
  }
  return isUtf8(chunk.subarray(from, to));
}

/**
 * NDJSON: a record a line (LF; a CR before it is dropped); blank lines are skipped. A line over
 * `maxBytes` is a fault of its own, never held.
 */
export async function* readNdjsonLines(source: AsyncIterable<Buffer>, maxBytes: number): AsyncGenerator<Piece<NdjsonLine>> {
  let held: Buffer[] = [];
  let heldBytes = 0;
  let tooLong = false;
  let line = 0;
  for await (const chunk of source) {
    const records: NdjsonLine[] = [];
    const chunkIsUtf8 = wholeCharsAreUtf8(chunk, heldBytes > 0);
    let start = 0;
    for (;;) {
      // Blank lines (LF, CRLF) are only counted: a file of nothing else costs no more.
      if (!heldBytes && !tooLong) {
        for (;;) {
          if (chunk[start] === LF) start++;
          else if (chunk[start] === CR && chunk[start + 1] === LF) start += 2;
          else break;
          line++;
        }
      }
      const nl = chunk.indexOf(LF, start);
      if (nl === -1) break;
      line++;
      let record: NdjsonLine | undefined;
      if (tooLong || heldBytes + nl - start > maxBytes) record = { line, fault: 'too_long' };
      else if (heldBytes) record = ndjsonLine(line, Buffer.concat([...held, chunk.subarray(start, nl)]), false);
      else record = ndjsonLine(line, chunk.subarray(start, nl), chunkIsUtf8);
      if (record) records.push(record);
      held = [];
      heldBytes = 0;
      tooLong = false;
      start = nl + 1;
    }
    if (start < chunk.length) {
      if (tooLong || heldBytes + chunk.length - start > maxBytes) {
        tooLong = true;
        held = [];
        heldBytes = 0;
      } else {
        held.push(chunk.subarray(start));
        heldBytes += chunk.length - start;
      }
    }
    yield { records, readTo: line };
  }
  if (heldBytes || tooLong) {
    line++;
    const record = tooLong ? { line, fault: 'too_long' as const } : ndjsonLine(line, Buffer.concat(held), false);
    yield { records: record ? [record] : [], readTo: line };
  }
}

/** A line's text, without the CR of a CRLF; undefined when blank. */
function ndjsonLine(line: number, bytes: Buffer, knownUtf8: boolean): NdjsonLine | undefined {
  const end = bytes.length > 0 && bytes[bytes.length - 1] === CR ? bytes.length - 1 : bytes.length;
  if (end === 0) return undefined;
  if (!knownUtf8 && !isUtf8(bytes)) return { line, fault: 'not_utf8' };
  const text = bytes.toString('utf8', 0, end);
  return text.trim() === '' ? undefined : { line, text };
}

// Where the CSV reader is within a record.
const FIELD_START = 0;
const UNQUOTED = 1;
const QUOTED = 2;
/** A quote inside a quoted cell: the next byte says whether it was doubled, or closed the cell. */
const QUOTE_IN_QUOTED = 3;

/**
 * CSV records, split on commas; a record ends at a CRLF, a LF or a CR outside quotes, and each of
 * them ends a line, inside quotes too. A cell that starts with a quote is quoted: it may hold
 * commas, line breaks and doubled quotes; a quote that closes it before something other than a
 * comma or the record's end is taken as text, with what follows, as spreadsheets read
 * `"12" monitor`; a quote in a cell that does not start with one is text. Empty lines are
 * skipped (counted, never held). A quote never closed, or a record over `maxBytes`, stops the
 * file (CsvSyntaxError): what follows cannot be told apart into records.
 */
export async function* readCsvRecords(source: AsyncIterable<Buffer>, maxBytes: number): AsyncGenerator<Piece<CsvRecord>> {
  const scanner = new CsvScanner(maxBytes);
  for await (const chunk of source) {
    const records = scanner.scan(chunk);
    yield { records, readTo: scanner.readTo };
  }
  const last = scanner.end();
  if (last) yield { records: [last], readTo: scanner.readTo };
}

/** readCsvRecords's state between chunks; `scan` works on local copies of it (a byte at a time). */
class CsvScanner {
  private state = FIELD_START;
  /** The line of the next byte. */
  private line = 1;
  /** The line the record being read starts on. */
  private recordLine = 1;
  /** Whether the record being read has a quoted cell (then split by splitQuoted, else on commas). */
  private quoted = false;
  /** The last byte was a CR: a LF now is the same line break. */
  private afterCr = false;
  /** The line the last record read ends on (0: none yet). */
  private lastEnd = 0;
  /** The record's bytes from earlier chunks. */
  private held: Buffer[] = [];
  private heldBytes = 0;

  constructor(private readonly maxBytes: number) {}

  /** Every line before the record being read (if any) has been read. */
  get readTo(): number {
    return this.recordLine - 1;
  }

  /** The records a chunk completes. */
  scan(chunk: Buffer): CsvRecord[] {
    const records: CsvRecord[] = [];
    const chunkIsUtf8 = wholeCharsAreUtf8(chunk, this.heldBytes > 0);
    let { state, line, recordLine, quoted, afterCr } = this;
    /** Where the record being read starts in this chunk. */
    let start = 0;
    for (let i = 0; i < chunk.length; i++) {
      const b = chunk[i]!;
      if (b === LF || b === CR) {
        const crlf = b === LF && afterCr;
        afterCr = b === CR;
        if (state === QUOTED) {
          if (!crlf) line++;
        } else if (crlf) {
          // The LF of a CRLF that ended a record (or a blank line).
          start = i + 1;
        } else {
          if (i > start || this.heldBytes) {
            records.push(this.record(chunk, start, i, chunkIsUtf8, recordLine, quoted));
            this.lastEnd = line;
          }
          line++;
          recordLine = line;
          state = FIELD_START;
          quoted = false;
          start = i + 1;
        }
        continue;
      }
      afterCr = false;
      if (state === FIELD_START) {
        if (b === QUOTE) {
          state = QUOTED;
          quoted = true;
        } else if (b !== COMMA) state = UNQUOTED;
      } else if (state === UNQUOTED) {
        if (b === COMMA) state = FIELD_START;
      } else if (state === QUOTED) {
        if (b === QUOTE) state = QUOTE_IN_QUOTED;
      } else state = b === QUOTE ? QUOTED : b === COMMA ? FIELD_START : UNQUOTED;
    }
    this.state = state;
    this.line = line;
    this.recordLine = recordLine;
    this.quoted = quoted;
    this.afterCr = afterCr;
    if (start < chunk.length) {
      if (this.heldBytes + chunk.length - start > this.maxBytes) throw tooLong(this.lastEnd, this.maxBytes);
      this.held.push(chunk.subarray(start));
      this.heldBytes += chunk.length - start;
    }
    return records;
  }

  /** The last record, when the file does not end with a line break. */
  end(): CsvRecord | undefined {
    if (this.state === QUOTED) throw new CsvSyntaxError(this.lastEnd, 'Quote Not Closed: the file ends inside a quoted cell');
    if (!this.heldBytes) return undefined;
    const record = this.record(Buffer.alloc(0), 0, 0, true, this.recordLine, this.quoted);
    this.lastEnd = this.line;
    this.recordLine = this.line + 1;
    return record;
  }

  /** The record that ends at `end` of this chunk, with what earlier chunks held of it. */
  private record(chunk: Buffer, start: number, end: number, chunkIsUtf8: boolean, line: number, quoted: boolean): CsvRecord {
    if (this.heldBytes + end - start > this.maxBytes) throw tooLong(this.lastEnd, this.maxBytes);
    let bytes = chunk;
    let utf8 = chunkIsUtf8;
    if (this.heldBytes) {
      bytes = Buffer.concat([...this.held, chunk.subarray(start, end)]);
      start = 0;
      end = bytes.length;
      this.held = [];
      this.heldBytes = 0;
      utf8 = isUtf8(bytes);
    } else if (!utf8) utf8 = isUtf8(chunk.subarray(start, end));
    if (!utf8) return { line, notUtf8: firstBadCell(bytes.toString('latin1', start, end)) };
    const text = bytes.toString('utf8', start, end);
    return { line, cells: quoted ? splitQuoted(text) : text.split(','), text };
  }
}

function tooLong(afterLine: number, maxBytes: number): CsvSyntaxError {
  return new CsvSyntaxError(afterLine, `Record Too Long: a record is longer than the ${maxBytes} bytes one may be`);
}

/**
 * The cells of a record's text that has a quoted cell (see readCsvRecords): a doubled quote in a
 * quoted cell is one quote; a cell whose closing quote is followed by more text is kept as
 * written from its opening quote, its doubled quotes halved.
 */
function splitQuoted(text: string): string[] {
  const cells: string[] = [];
  let i = 0;
  for (;;) {
    let end: number;
    if (text.charCodeAt(i) === QUOTE) {
      let cell = '';
      let from = i + 1;
      for (;;) {
        const q = text.indexOf('"', from);
        cell += text.slice(from, q);
        const next = text.charCodeAt(q + 1);
        if (next === QUOTE) {
          cell += '"';
          from = q + 2;
          continue;
        }
        if (q + 1 === text.length || next === COMMA) end = q + 1;
        else {
          const comma = text.indexOf(',', q + 1);
          end = comma === -1 ? text.length : comma;
          cell = `"${cell}"${text.slice(q + 1, end)}`;
        }
        break;
      }
      cells.push(cell);
    } else {
      const comma = text.indexOf(',', i);
      end = comma === -1 ? text.length : comma;
      cells.push(text.slice(i, end));
    }
    if (end >= text.length) return cells;
    i = end + 1;
  }
}

/** The first cell whose bytes (a latin1 string: a character a byte) are not UTF-8; -1 when none alone is. */
function firstBadCell(bytes: string): number {
  const cells = bytes.includes('"') ? splitQuoted(bytes) : bytes.split(',');
  return cells.findIndex((cell) => !isUtf8(Buffer.from(cell, 'latin1')));
}
