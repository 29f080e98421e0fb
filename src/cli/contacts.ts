import { closeSync, createReadStream, createWriteStream, fchmodSync, openSync, readSync, statSync, type ReadStream } from 'node:fs';
import { extname } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import type { Command } from 'commander';
import { IMPORT_MODES, type ImportFormat, type ImportMode } from '../core/db/schema.js';
import {
  checkCharset,
  decompressIfGzip,
  exportContacts,
  importContacts,
  isGzip,
  type ExportFormat,
  type ImportJobView,
} from '../core/services/contactImport.js';
import { contactCount } from '../core/services/billing.js';
import { getWorkspace } from '../core/services/workspaces.js';
import { CliError, globals, output, parseId, withSession } from './io.js';

function formatOf(file: string, given: string | undefined): ImportFormat {
  // list.csv.gz is a CSV file, compressed.
  const named = file.toLowerCase().endsWith('.gz') ? file.slice(0, -3) : file;
  const format = given ?? ({ '.csv': 'csv', '.ndjson': 'ndjson', '.jsonl': 'ndjson' } as Record<string, string>)[extname(named).toLowerCase()];
  if (format !== 'csv' && format !== 'ndjson')
    throw new CliError(
      given ? `--format must be ndjson or csv, got "${given}"` : `cannot tell the format of "${file}" from its name: give --format ndjson or --format csv`,
    );
  return format;
}

function startsAsGzip(file: string): boolean {
  const head = Buffer.alloc(2);
  const fd = openSync(file, 'r');
  try {
    return isGzip(head.subarray(0, readSync(fd, head, 0, 2, 0)));
  } finally {
    closeSync(fd);
  }
}

function modeOf(given: string): ImportMode {
  if (!(IMPORT_MODES as readonly string[]).includes(given)) throw new CliError(`--mode must be one of ${IMPORT_MODES.join(', ')}, got "${given}"`);
  return given as ImportMode;
}

/** --charset, checked by the same rule as the API's `charset=` (a label no decoder knows is refused). */
function charsetOption(given: string | undefined): string | undefined {
  if (given === undefined) return undefined;
  try {
    return checkCharset(given);
  } catch (err) {
    throw new CliError(`--charset: ${(err as Error).message}`);
  }
}

/**
 * A one-line progress bar redrawn in place on a terminal's stderr, at most ten times a second
 * (never when output is for a script): a bar and percentage when the share done is known,
 * then what has been done so far.
 */
function progressLine(enabled: boolean) {
  let last = 0;
  let latest: string | null = null;
  const draw = () => process.stderr.write(`\r${latest}`);
  return {
    update(ratio: number | null, text: string) {
      if (!enabled) return;
      const width = 30;
      const done = ratio === null ? 0 : Math.min(1, ratio);
      latest = `${ratio === null ? '' : `[${'#'.repeat(Math.round(done * width)).padEnd(width, '.')}] ${(done * 100).toFixed(0).padStart(3)}% `}${text}`;
      if (Date.now() - last < 100) return;
      last = Date.now();
      draw();
    },
    /** Draws the last state (an update may have been skipped as too soon) and ends the line. */
    done() {
      if (!enabled || latest === null) return;
      draw();
      process.stderr.write('\n');
    },
  };
}

function describe(job: ImportJobView): string {
  const lines = [
    `import ${job.id}: ${job.status}${job.failure ? ` (${job.failure.code}: ${job.failure.detail})` : ''}`,
    `  ${job.created} created, ${job.updated} updated, ${job.skipped} skipped, ${job.errorCount} refused, ${job.lines} lines`,
  ];
  for (const e of job.errors.slice(0, 20)) lines.push(`  line ${e.line}${e.field ? ` ${e.field}` : ''}: ${e.reason}`);
  if (job.errorCount > 20) lines.push(`  ... and ${job.errorCount - 20} more (--json lists the first ${job.errors.length})`);
  return lines.join('\n');
}

export function registerContacts(program: Command): void {
  const contacts = program.command('contacts').description('import and export contacts');

  contacts
    .command('import')
    .description('import contacts from an NDJSON or CSV file (- for standard input), streamed; the same rules as POST /contacts/import')
    .argument('<file>', 'the file (.ndjson, .jsonl or .csv, gzip-compressed or not), or - for standard input')
    .requiredOption('--workspace <id>', 'workspace id')
    .option('--format <format>', 'ndjson or csv (default: from the file name)')
    .option('--mode <mode>', 'create, update or upsert', 'upsert')
    .option('--charset <encoding>', "the file's encoding when it is not UTF-8 (windows-1252, iso-8859-15, utf-16le...)")
    .action((file: string, opts: { workspace: string; format?: string; mode: string; charset?: string }, cmd: Command) =>
      withSession(cmd, async ({ ctx, config, inWorkspace }) => {
        const workspaceId = parseId(opts.workspace, 'workspace id');
        await getWorkspace(ctx, workspaceId); // 404 before anything is read
        const format = formatOf(file, opts.format);
        const mode = modeOf(opts.mode);
        const charset = charsetOption(opts.charset);
        const stdin = file === '-';
        let size: number | null = null;
        if (!stdin) {
          let stat: ReturnType<typeof statSync>;
          try {
            stat = statSync(file);
          } catch {
            throw new CliError(`cannot read ${file}`);
          }
          // A folder would start a job that fails on its first read: say so before one exists.
          if (stat.isDirectory()) throw new CliError(`${file} is a folder: give the file to import`);
          // A pipe (or another special file) has no size of its own: read to its end.
          size = stat.isFile() ? stat.size : null;
        }
        // A gzip file is imported decompressed; its bar follows the compressed bytes read.
        const gzip = size !== null && startsAsGzip(file);
        const bar = progressLine(!globals(cmd).json && !!process.stderr.isTTY);
        const raw = stdin ? process.stdin : createReadStream(file, { highWaterMark: 256 * 1024 });
        const job = await importContacts(
          inWorkspace(workspaceId),
          decompressIfGzip(raw),
          { format, mode, bytesTotal: gzip ? null : size, maxBytes: config.importMaxBytes, charset },
          {
            onProgress: (p) => {
              // A gzip file's progress is through the compressed bytes read from the file.
              const [read, total] = gzip ? [(raw as ReadStream).bytesRead, size] : [p.bytesRead, p.bytesTotal];
              bar.update(total ? read / total : null, `${p.lines} lines, ${p.created} created, ${p.updated} updated, ${p.errorCount} errors`);
            },
          },
        );
        bar.done();
        output(cmd, job, () => describe(job));
        if (job.status !== 'COMPLETED') {
          // The job is the answer (standard output, --json or not); the failure is also the one
          // line on stderr that every failed command prints (API.md 6).
          process.stderr.write(`error: import ${job.id} ${job.status}${job.failure ? `: ${job.failure.code}: ${job.failure.detail}` : ''}\n`);
          process.exitCode = 1;
        }
      }),
    );

  contacts
    .command('export')
    .description('export contacts as NDJSON or CSV (newest first), to standard output or --out FILE; both import back')
    .requiredOption('--workspace <id>', 'workspace id')
    .option('--format <format>', 'ndjson or csv', 'ndjson')
    .option('--out <file>', 'write to this file instead of standard output (gzip-compressed when it ends in .gz)')
    .option('--tag <tag>', 'only contacts with this tag')
    .option('--q <text>', 'only contacts whose email, phone or name contains this')
    .option('--email <email>', 'only the contact with this email')
    .option('--phone <phone>', 'only the contact with this phone')
    .action((opts: { workspace: string; format: string; out?: string; tag?: string; q?: string; email?: string; phone?: string }, cmd: Command) =>
      withSession(cmd, async ({ ctx, inWorkspace }) => {
        const workspaceId = parseId(opts.workspace, 'workspace id');
        await getWorkspace(ctx, workspaceId);
        if (opts.format !== 'ndjson' && opts.format !== 'csv') throw new CliError(`--format must be ndjson or csv, got "${opts.format}"`);
        // --json is one JSON document on standard output (API.md 6): the summary of an export
        // written to a file. Without --out the export itself is standard output.
        if (globals(cmd).json && !opts.out)
          throw new CliError(
            '--json prints the summary of an export written with --out FILE; without --out the export itself goes to standard output (drop --json)',
          );
        const format = opts.format as ExportFormat;
        const filter = {
          ...(opts.tag !== undefined ? { tag: opts.tag } : {}),
          ...(opts.q !== undefined ? { q: opts.q } : {}),
          ...(opts.email !== undefined ? { email: opts.email } : {}),
          ...(opts.phone !== undefined ? { phone: opts.phone } : {}),
        };
        let count = 0;
        // Into a file from a terminal: a progress line, with a bar when the whole list is
        // exported (its size is the workspace's contact count, kept as contacts come and go).
        const bar = progressLine(opts.out !== undefined && !globals(cmd).json && !!process.stderr.isTTY);
        const total = Object.keys(filter).length === 0 ? await contactCount(inWorkspace(workspaceId)) : null;
        async function* counting() {
          // Contacts, not lines: a CSV cell may hold a line break.
          const counted = (contacts: number) => {
            count += contacts;
          };
          for await (const chunk of exportContacts(inWorkspace(workspaceId), format, filter, counted)) {
            bar.update(total ? count / total : null, `${count} contacts written`);
            yield chunk;
          }
        }
        if (!opts.out) {
          await pipeline(Readable.from(counting()), process.stdout, { end: false });
          return;
        }
        // all.csv.gz: written gzip-compressed (svc contacts import reads it back as it is).
        // 0600 whether the file is new or not (a mode given to open applies only to a new file).
        let fd: number;
        try {
          fd = openSync(opts.out, 'w', 0o600);
          fchmodSync(fd, 0o600);
        } catch (err) {
          throw new CliError(`cannot write ${opts.out}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
        }
        const file = createWriteStream('', { fd });
        if (opts.out.toLowerCase().endsWith('.gz')) await pipeline(Readable.from(counting()), createGzip(), file);
        else await pipeline(Readable.from(counting()), file);
        bar.done();
        output(cmd, { file: opts.out, format, contacts: count }, `${count} contacts written to ${opts.out} (${format})`);
      }),
    );
}
