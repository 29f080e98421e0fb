import type { Command } from 'commander';
import { loadConfig } from '../core/config.js';
import { backupDatabase, restoreBackup, type BackupProgress } from '../core/services/backup.js';
import { CliError, configFlags, globals, output } from './io.js';

function megabytes(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

/** A progress line rewritten in place, only when a person watches stderr. */
function progressLine(enabled: boolean): { show(text: string): void; end(): void } {
  let shown = false;
  return {
    show(text) {
      if (!enabled) return;
      process.stderr.write(`\r\x1b[2K${text}`);
      shown = true;
    },
    end() {
      if (shown) process.stderr.write('\r\x1b[2K');
      shown = false;
    },
  };
}

export function registerBackup(program: Command): void {
  program
    .command('backup')
    .description('write a consistent copy of the database (and the secrets it needs) while the server runs')
    .requiredOption('--to <file>', 'the backup file to write (must not exist)')
    .action(async (opts: { to: string }, cmd: Command) => {
      const config = loadConfig(configFlags(cmd));
      if (config.databaseUrl) throw new CliError('svc backup copies the SQLite file of the data folder; with databaseUrl set, back up PostgreSQL with pg_dump');
      const line = progressLine(!globals(cmd).json && !!process.stderr.isTTY);
      let result: Awaited<ReturnType<typeof backupDatabase>>;
      try {
        result = await backupDatabase(config, opts.to, {
          onProgress: (p: BackupProgress) =>
            line.show(
              `backing up ${megabytes(p.bytesWritten)}${p.bytesTotal ? ` of about ${megabytes(p.bytesTotal)} (${Math.min(99, Math.floor((100 * p.bytesWritten) / p.bytesTotal))}%)` : ''}`,
            ),
        });
      } finally {
        line.end();
      }
      output(
        cmd,
        {
          path: result.path,
          size: result.size,
          schemaVersion: result.schemaVersion,
          migrations: result.migrations,
          createdAt: result.createdAt,
          durationMs: result.durationMs,
          containsSecrets: true,
        },
        [
          `backup written to ${result.path} (${megabytes(result.size)}, schema ${result.schemaVersion ?? '(none)'}, ${(result.durationMs / 1000).toFixed(1)} s)`,
          'It holds the secrets (JWT key and encryption key) that the stored credentials need: keep it as private as config.json.',
        ].join('\n'),
      );
    });

  program
    .command('restore')
    .description("replace the data folder's database (and secrets) with a backup; the server must be stopped")
    .argument('<file>', 'a file written by "svc backup"')
    .action((file: string, _opts: unknown, cmd: Command) => {
      const json = globals(cmd).json === true;
      if (configFlags(cmd).databaseUrl ?? process.env.SVC_DATABASE_URL)
        throw new CliError('svc restore writes the SQLite file of the data folder; with databaseUrl set, restore PostgreSQL with pg_restore');
      const result = restoreBackup(globals(cmd).dataDir, process.env, file, (step, detail) => {
        if (!json && process.stderr.isTTY && step !== 'done') process.stderr.write(`${detail}…\n`);
      });
      output(cmd, result, () => {
        const out = [
          `restored ${result.from} into ${result.database} (integrity ok, schema ${result.schemaVersion ?? '(none)'}, backup of ${result.backup.createdAt})`,
        ];
        out.push(`secrets (JWT key, encryption key) written to ${result.dataDir}/config.json`);
        if (result.previous.database)
          out.push(`the previous database was kept as ${result.previous.database}${result.previous.files.length > 1 ? ' (with its -wal/-shm files)' : ''}`);
        if (result.previous.config) out.push(`the previous config was kept as ${result.previous.config} (it holds the secrets of the previous database)`);
        if (result.pendingMigrations.length)
          out.push(`${result.pendingMigrations.length} migration(s) will be applied when the server next starts (or run "svc migrate")`);
        out.push('start the server with "svc serve"');
        return out.join('\n');
      });
    });
}
