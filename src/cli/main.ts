import { Command, CommanderError } from 'commander';
import { AppError } from '../core/errors.js';
import { registerBackup } from './backup.js';
import { registerCheckout } from './checkout.js';
import { registerContacts } from './contacts.js';
import { registerDb } from './db.js';
import { registerDoctor } from './doctor.js';
import { registerInit } from './init.js';
import { registerKeys } from './keys.js';
import { registerMigrate } from './migrate.js';
import { registerServe } from './serve.js';
import { registerAdmin, registerUser } from './user.js';
import { registerWorkspace } from './workspace.js';
import { registerRuns, registerWebhook, registerWorkflow } from './workflow.js';
import { VERSION } from '../core/version.js';
import { carriedSchemaVersion } from '../core/db/migrate.js';

/** `svc --version`: the version, and the schema version (latest migration) this binary carries. */
function versionLine(): string {
  let schema: string | null = null;
  try {
    schema = carriedSchemaVersion();
  } catch {
    // No migrations folder found: say the version alone.
  }
  return schema ? `${VERSION} (schema ${schema})` : VERSION;
}

export function buildProgram(): Command {
  const program = new Command('svc')
    .description('svc: self-hosted customer messaging and automation')
    .version(versionLine())
    .option('--data-dir <dir>', 'data folder (default $SVC_DATA_DIR, else ./data)')
    .option('--database-url <url>', 'PostgreSQL instead of SQLite in the data folder (default $SVC_DATABASE_URL)')
    .option('--redis-url <url>', 'Redis shared by the nodes of a cluster, for the limits counted across them (default $SVC_REDIS_URL)')
    .option('--json', 'print one JSON document on stdout')
    .exitOverride();
  registerInit(program);
  registerMigrate(program);
  registerServe(program);
  registerWorkspace(program);
  registerUser(program);
  registerAdmin(program);
  registerKeys(program);
  registerContacts(program);
  registerWorkflow(program);
  registerWebhook(program);
  registerRuns(program);
  registerCheckout(program);
  registerBackup(program);
  registerDb(program);
  registerDoctor(program);
  for (const cmd of program.commands) cmd.exitOverride();
  return program;
}

/** One line on stderr for the operator; never a stack trace unless SVC_DEBUG is set. */
function describeError(err: unknown): string {
  if (err instanceof AppError) {
    const details = err.errors?.map((e) => `${e.path} ${e.message}`).join('; ');
    return details ? `${err.message} (${details})` : err.message;
  }
  if (err instanceof Error) return err.message.split('\n')[0] ?? 'failed';
  return String(err);
}

export async function main(argv: string[]): Promise<void> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      // Help and version exit 0; commander has already printed usage errors.
      process.exitCode = err.exitCode;
      return;
    }
    if (err && typeof err === 'object' && (err as { name?: string }).name === 'ExitPromptError') {
      process.stderr.write('error: cancelled\n');
      process.exitCode = 130;
      return;
    }
    process.stderr.write(`error: ${describeError(err)}\n`);
    if (process.env.SVC_DEBUG) process.stderr.write(`${(err as Error).stack ?? ''}\n`);
    process.exitCode = 1;
  }
}
