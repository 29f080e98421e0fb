import { resolve } from 'node:path';
import type { Command } from 'commander';
import { databaseUrlOf, isInitialised, loadConfig, redactDatabaseUrl, resolveDataDir } from '../core/config.js';
import {
  copyPgToSqlite,
  copySqliteToPg,
  type DbCopyOptions,
  type DbCopyProgress,
  type DbCopyResult,
  type DbCopyStep,
  type Secrets,
} from '../core/services/dbCopy.js';
import { CliError, configFlags, globals, output, table } from './io.js';

/**
 * The secrets the copied data needs, when the source is PostgreSQL: those of the nodes that
 * serve it, as a node reads them (SVC_JWT_SECRET and SVC_ENCRYPTION_KEY over the data folder's
 * config.json); without a data folder, from those two variables alone.
 */
function nodeSecrets(cmd: Command, env: NodeJS.ProcessEnv): { secrets: Secrets; from: string } {
  const flags = configFlags(cmd);
  const dataDir = resolveDataDir(flags.dataDir, env);
  if (isInitialised(dataDir)) {
    const config = loadConfig(flags, env);
    const fromEnv = env.SVC_JWT_SECRET && env.SVC_ENCRYPTION_KEY;
    return { secrets: { ...config.secrets }, from: fromEnv ? 'SVC_JWT_SECRET and SVC_ENCRYPTION_KEY' : `${dataDir}/config.json` };
  }
  const jwtSecret = env.SVC_JWT_SECRET ?? '';
  const encryptionKey = env.SVC_ENCRYPTION_KEY ?? '';
  if (jwtSecret.length < 32 || encryptionKey.length < 32)
    throw new CliError(
      `the copy needs the secrets of the nodes serving this database: ${dataDir} has no config.json; give --data-dir of a node's data folder, or set SVC_JWT_SECRET and SVC_ENCRYPTION_KEY (32 characters or more each)`,
    );
  return { secrets: { jwtSecret, encryptionKey }, from: 'SVC_JWT_SECRET and SVC_ENCRYPTION_KEY' };
}

/** A one-line progress bar redrawn in place on a terminal's stderr (never when output is for a script), as `svc contacts import` draws it. */
function progressBar(enabled: boolean) {
  let last = 0;
  let drawn = false;
  const draw = (text: string) => {
    process.stderr.write(`\r\x1b[2K${text}`);
    drawn = true;
  };
  return {
    step(step: DbCopyStep) {
      if (!enabled) return;
      const text = {
        checking: 'checking source and target',
        migrating: 'migrating the target',
        copying: 'copying',
        verifying: 'verifying row counts',
        committing: 'committing',
      }[step];
      draw(`${text}…`);
    },
    update(p: DbCopyProgress) {
      if (!enabled || (p.rows !== p.total && Date.now() - last < 100)) return;
      last = Date.now();
      const width = 30;
      const ratio = p.total ? Math.min(1, p.rows / p.total) : 1;
      draw(
        `[${'#'.repeat(Math.round(ratio * width)).padEnd(width, '.')}] ${(ratio * 100).toFixed(0).padStart(3)}% table ${p.tableIndex}/${p.tableCount} ${p.table}: ${p.rows} of ${p.total} rows`,
      );
    },
    done() {
      if (drawn) process.stderr.write('\r\x1b[2K');
      drawn = false;
    },
  };
}

/**
 * Runs a copy with its progress bar, and with Ctrl-C (or a TERM) stopping it between two
 * batches, which undoes it like any failure; a second signal exits at once.
 */
async function withProgress<T>(showProgress: boolean, copy: (handlers: DbCopyOptions) => Promise<T>): Promise<T> {
  const bar = progressBar(showProgress);
  const interrupted = new AbortController();
  const stop = () => {
    if (interrupted.signal.aborted) process.exit(130);
    interrupted.abort(new CliError('interrupted: the copy was undone, nothing was committed'));
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  try {
    return await copy({ onProgress: (p) => bar.update(p), onStep: (s) => bar.step(s), signal: interrupted.signal });
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
    bar.done();
  }
}

function summary(result: DbCopyResult, from: string, to: string): string {
  return [
    `copied ${result.totalRows} rows in ${result.tables.length} tables from ${from} to ${to} in ${(result.ms / 1000).toFixed(1)} s; every table's row count verified`,
    '',
    table(result.tables, ['table', 'rows']),
  ].join('\n');
}

export function registerDb(program: Command): void {
  const db = program.command('db').description('move the data between SQLite and PostgreSQL');

  db.command('copy')
    .description(
      "copy every table into an empty store, all or nothing: this data folder's SQLite into PostgreSQL (--to), or PostgreSQL into a new data folder (--from … --to-data-dir)",
    )
    .option('--to <url>', "an empty PostgreSQL database to copy the data folder's SQLite database into (migrated first)")
    .option('--from <url>', 'a PostgreSQL database to copy into a new data folder (with --to-data-dir)')
    .option('--to-data-dir <dir>', 'the new (or empty) data folder to write, with the secrets of --data-dir or SVC_JWT_SECRET/SVC_ENCRYPTION_KEY')
    .action(async (opts: { to?: string; from?: string; toDataDir?: string }, cmd: Command) => {
      const json = globals(cmd).json === true;
      if (globals(cmd).databaseUrl) throw new CliError('svc db copy names its PostgreSQL database with --to or --from, not --database-url');
      if (opts.to && (opts.from || opts.toDataDir))
        throw new CliError('give either --to postgres://… (from this data folder) or --from postgres://… --to-data-dir DIR, not both');
      if (!opts.to && !opts.from) throw new CliError('say where to copy: --to postgres://… (from this data folder) or --from postgres://… --to-data-dir DIR');
      if (opts.from && !opts.toDataDir) throw new CliError('--from needs --to-data-dir DIR: the new (or empty) data folder to copy into');
      const run = <T>(copy: (handlers: DbCopyOptions) => Promise<T>) => withProgress(!json && !!process.stderr.isTTY, copy);

      if (opts.to) {
        const url = databaseUrlOf(opts.to, '--to');
        const config = loadConfig(configFlags(cmd));
        const where = redactDatabaseUrl(url);
        const result = await run((handlers) => copySqliteToPg({ dataDir: config.dataDir, dbFile: config.dbFile }, url, handlers));
        output(
          cmd,
          {
            from: { store: 'sqlite', dataDir: config.dataDir, file: config.dbFile },
            to: { store: 'postgres', url: where },
            tables: result.tables,
            totalRows: result.totalRows,
            ms: result.ms,
          },
          () =>
            [
              summary(result, config.dbFile, where),
              '',
              `next: svc serve --data-dir ${config.dataDir} --database-url '${where}'`,
              `  ${config.dataDir}/config.json holds the secrets the copied data needs; give other nodes the same SVC_JWT_SECRET and SVC_ENCRYPTION_KEY`,
            ].join('\n'),
        );
        return;
      }

      const url = databaseUrlOf(opts.from!, '--from');
      const where = redactDatabaseUrl(url);
      const toDataDir = resolve(opts.toDataDir!);
      const { secrets, from } = nodeSecrets(cmd, process.env);
      const result = await run((handlers) => copyPgToSqlite(url, toDataDir, secrets, handlers));
      output(
        cmd,
        {
          from: { store: 'postgres', url: where },
          to: { store: 'sqlite', dataDir: result.dataDir, file: result.dbFile, config: result.configFile },
          tables: result.tables,
          totalRows: result.totalRows,
          ms: result.ms,
        },
        () =>
          [
            summary(result, where, result.dbFile),
            '',
            `the secrets (from ${from}) are in ${result.configFile}; no other setting was copied`,
            `next: svc serve --data-dir ${result.dataDir}`,
          ].join('\n'),
      );
    });
}
