import { Command, CommanderError } from 'commander';
import { AppError } from '../core/errors.js';
import { printable } from './io.js';
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

/** The schema version (latest migration) this binary carries, or null when no migrations folder is found. */
function carriedSchemaOrNull(): string | null {
  try {
    return carriedSchemaVersion();
  } catch {
    return null;
  }
}

/** `svc --version`: the version, and the schema version this binary carries (`--json`: both as JSON). */
function versionLine(): string {
  const schema = carriedSchemaOrNull();
  return schema ? `${VERSION} (schema ${schema})` : VERSION;
}

/** `svc workspace`, for a command's name in a message. */
function* ancestry(cmd: Command): Generator<string> {
  if (cmd.parent) yield* ancestry(cmd.parent);
  yield cmd.name();
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

/**
 * One line on stderr for the operator (API.md 6); never a stack trace unless SVC_DEBUG is set.
 * What the operator typed may be quoted in it (an email, a path): its control characters are
 * shown as escapes, so that a line break cannot make two lines nor ESC drive the terminal.
 */
function describeError(err: unknown): string {
  if (err instanceof AppError) {
    const details = err.errors?.map((e) => `${e.path} ${e.message}`).join('; ');
    return printable(details ? `${err.message} (${details})` : err.message);
  }
  if (err instanceof Error) return printable(err.message || 'failed');
  return printable(String(err));
}

/**
 * Commander's own errors (an unknown option, a missing argument) and the help it shows for a
 * command named without one of its subcommands are written here, then said in one line.
 */
function quietCommander(cmd: Command, written: string[]): void {
  cmd.configureOutput({ writeErr: (text) => written.push(text) });
  for (const sub of cmd.commands) quietCommander(sub, written);
}

/** The command the arguments name (`svc workspace`): each of them that names a subcommand of the last. */
function namedCommand(program: Command, args: string[]): Command {
  let at = program;
  for (const arg of args) {
    const next = at.commands.find((c) => c.name() === arg || c.aliases().includes(arg));
    if (next) at = next;
  }
  return at;
}

/** The arguments before the command's name (the program's options: --version, --json, --data-dir DIR). */
function leadingOptions(program: Command, args: string[]): string[] {
  const first = args.findIndex((a) => program.commands.some((c) => c.name() === a || c.aliases().includes(a)));
  return first === -1 ? args : args.slice(0, first);
}

export async function main(argv: string[]): Promise<void> {
  const program = buildProgram();
  const written: string[] = [];
  quietCommander(program, written);
  const args = argv.slice(2);
  const lead = leadingOptions(program, args);
  if (lead.includes('--json') && (lead.includes('--version') || lead.includes('-V'))) {
    process.stdout.write(`${JSON.stringify({ version: VERSION, schema: carriedSchemaOrNull() }, null, 2)}\n`);
    return;
  }
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      // Help and version exit 0 (on stdout).
      process.exitCode = err.exitCode;
      if (err.exitCode === 0) return;
      const named = namedCommand(program, args);
      const path = [...ancestry(named)].join(' ');
      const line =
        err.code === 'commander.help'
          ? `${path} needs a command: ${named.commands.map((c) => c.name()).join(', ')} (${path} --help)`
          : written
              .join('')
              .replace(/^error: /, '')
              .trim() || err.message.replace(/^error: /, '');
      process.stderr.write(`error: ${printable(line.replace(/\s*\n\s*/g, ' '))}\n`);
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
