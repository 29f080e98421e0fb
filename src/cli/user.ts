import { password as passwordPrompt } from '@inquirer/prompts';
import type { Command } from 'commander';
import { generatePassword } from '../core/crypto.js';
import { parseRole } from '../core/roles.js';
import { createUser, setPassword, setSuperAdmin, type UserView } from '../core/services/users.js';
import { CliError, globals, interactive, output, parseId, readSecretFromStdin, withSession } from './io.js';

async function obtainPassword(opts: { passwordStdin?: boolean }, cmd: Command): Promise<string | undefined> {
  if (opts.passwordStdin) return readSecretFromStdin();
  if (interactive({ json: globals(cmd).json })) return (await passwordPrompt({ message: 'Password (empty to generate one)', mask: '*' })) || undefined;
  return undefined;
}

export function registerUser(program: Command): void {
  const user = program.command('user').description('create users and set their passwords');

  user
    .command('create')
    .description('create a user with a membership (or add an existing user to one more workspace)')
    .requiredOption('--email <email>', 'email address')
    .requiredOption('--workspace <id>', 'workspace id')
    .requiredOption('--role <role>', 'VIEWER, MEMBER, ADMIN or OWNER')
    .option('--password-stdin', 'read the password from standard input (otherwise one is generated)')
    .action(async (opts: { email: string; workspace: string; role: string; passwordStdin?: boolean }, cmd: Command) => {
      const role = parseRole(opts.role);
      if (!role) throw new CliError(`unknown role "${opts.role}"; use VIEWER, MEMBER, ADMIN or OWNER`);
      const workspaceId = parseId(opts.workspace, 'workspace id');
      const given = await obtainPassword(opts, cmd);
      await withSession(cmd, async ({ ctx }) => {
        const generated = given === undefined ? generatePassword() : undefined;
        const created = await createUser(ctx, { email: opts.email, workspaceId, role, password: given ?? generated });
        const showPassword = created.created && generated !== undefined;
        output(cmd, { id: created.id, email: created.email, ...(showPassword ? { password: generated } : {}) }, () =>
          created.created
            ? `created user ${created.id} ${created.email} as ${role} of workspace ${workspaceId}${showPassword ? `\n  password ${generated}   <- shown once` : ''}`
            : `added existing user ${created.id} ${created.email} as ${role} of workspace ${workspaceId} (password unchanged)`,
        );
      });
    });

  user
    .command('passwd')
    .description("set a user's password (ends every session of that user)")
    .argument('<email>', 'email address')
    .option('--password-stdin', 'read the password from standard input')
    .action(async (email: string, opts: { passwordStdin?: boolean }, cmd: Command) => {
      const password = opts.passwordStdin
        ? await readSecretFromStdin()
        : interactive({ json: globals(cmd).json })
          ? await passwordPrompt({ message: `New password for ${email}`, mask: '*' })
          : undefined;
      if (!password) throw new CliError('pass the new password on standard input with --password-stdin');
      await withSession(cmd, async ({ ctx }) => {
        const u = await setPassword(ctx, email, password);
        output(cmd, { id: u.id, email: u.email }, `password changed for ${u.email}; ${u.sessionsEnded} session(s) ended`);
      });
    });
}

export function registerAdmin(program: Command): void {
  const admin = program.command('admin').description('grant or revoke the super-admin flag');
  const show = (u: UserView) => ({ id: u.id, email: u.email, isSuperAdmin: u.isSuperAdmin });
  for (const [name, flag] of [
    ['grant', true],
    ['revoke', false],
  ] as const) {
    admin
      .command(name)
      .description(flag ? 'make a user super-admin' : "remove a user's super-admin flag")
      .argument('<email>', 'email address')
      .action((email: string, _opts: unknown, cmd: Command) =>
        withSession(cmd, async ({ ctx }) => {
          const u = await setSuperAdmin(ctx, email, flag);
          output(cmd, show(u), `${u.email} is ${u.isSuperAdmin ? 'now' : 'no longer'} a super-admin`);
        }),
      );
  }
}
