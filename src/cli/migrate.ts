import type { Command } from 'commander';
import { loadConfig } from '../core/config.js';
import { openDatabase } from '../core/db/connection.js';
import { migrate, migrationStatus } from '../core/db/migrate.js';
import { globals, output } from './io.js';

export function registerMigrate(program: Command): void {
  program
    .command('migrate')
    .description('apply pending database migrations (idempotent)')
    .option('--status', 'only report applied and pending migrations')
    .action((opts: { status?: boolean }, cmd: Command) => {
      const config = loadConfig({ ...(globals(cmd).dataDir ? { dataDir: globals(cmd).dataDir } : {}) });
      const db = openDatabase(config.dbFile, { synchronous: config.dbSynchronous });
      try {
        if (opts.status) {
          const status = migrationStatus(db);
          output(
            cmd,
            status,
            () =>
              `applied: ${status.applied.length ? status.applied.join(', ') : '(none)'}\npending: ${status.pending.length ? status.pending.join(', ') : '(none)'}`,
          );
          return;
        }
        const { pending } = migrationStatus(db);
        const result = migrate(db, undefined, (tag) => {
          if (!globals(cmd).json) process.stderr.write(`applied ${tag} (${progress(tag, pending)})\n`);
        });
        output(
          cmd,
          { applied: result.applied, pending: result.pending },
          result.applied.length ? `applied ${result.applied.length} migration(s); the database is up to date` : 'nothing to apply; the database is up to date',
        );
      } finally {
        db.$client.close();
      }
    });
}

function progress(tag: string, pending: string[]): string {
  return `${pending.indexOf(tag) + 1}/${pending.length}`;
}
