import type { Command } from 'commander';
import { loadConfig, redactDatabaseUrl } from '../core/config.js';
import { openDatabase } from '../core/db/connection.js';
import { migrate, migrationStatus, type MigrationStatus } from '../core/db/migrate.js';
import { migratePg, pgMigrationStatus } from '../core/db/pgMigrate.js';
import { configFlags, globals, output } from './io.js';

/** The store's migrations: PostgreSQL when databaseUrl is set, else the data folder's SQLite file. */
interface Migrator {
  where: string;
  status(): Promise<MigrationStatus>;
  apply(onApply: (tag: string) => void): Promise<MigrationStatus>;
  close(): void;
}

function migratorFor(cmd: Command): Migrator {
  const config = loadConfig(configFlags(cmd));
  const url = config.databaseUrl;
  if (url) {
    return {
      where: redactDatabaseUrl(url),
      status: () => pgMigrationStatus(url),
      apply: (onApply) => migratePg(url, { onApply }),
      close: () => {},
    };
  }
  const db = openDatabase(config.dbFile, { synchronous: config.dbSynchronous });
  return {
    where: config.dbFile,
    status: async () => migrationStatus(db),
    apply: async (onApply) => migrate(db, undefined, onApply),
    close: () => db.$client.close(),
  };
}

export function registerMigrate(program: Command): void {
  program
    .command('migrate')
    .description('apply pending database migrations (idempotent; on PostgreSQL, nodes starting together wait for each other)')
    .option('--status', 'only report applied and pending migrations')
    .action(async (opts: { status?: boolean }, cmd: Command) => {
      const migrator = migratorFor(cmd);
      try {
        if (opts.status) {
          const status = await migrator.status();
          output(
            cmd,
            status,
            () =>
              `${migrator.where}\napplied: ${status.applied.length ? status.applied.join(', ') : '(none)'}\npending: ${status.pending.length ? status.pending.join(', ') : '(none)'}`,
          );
          return;
        }
        const { pending } = await migrator.status();
        const result = await migrator.apply((tag) => {
          if (!globals(cmd).json) process.stderr.write(`applied ${tag} (${progress(tag, pending)})\n`);
        });
        output(
          cmd,
          { applied: result.applied, pending: result.pending },
          result.applied.length ? `applied ${result.applied.length} migration(s); the database is up to date` : 'nothing to apply; the database is up to date',
        );
      } finally {
        migrator.close();
      }
    });
}

/** Position of tag among the pending ones (a concurrent node may have applied some first). */
function progress(tag: string, pending: string[]): string {
  const at = pending.indexOf(tag);
  return at < 0 ? tag : `${at + 1}/${pending.length}`;
}
