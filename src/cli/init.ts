import { input, password as passwordPrompt } from '@inquirer/prompts';
import type { Command } from 'commander';
import { DEFAULT_OWNER_EMAIL, DEFAULT_WORKSPACE_NAME, initialiseDataFolder, type InitResult } from '../core/bootstrap.js';
import type { Plan } from '../core/db/schema.js';
import { loadConfig } from '../core/config.js';
import { parsePlan } from '../core/roles.js';
import { CliError, cliActor, configFlags, globals, interactive, output, printable, readSecretFromStdin } from './io.js';

export function describeInit(result: InitResult, where: { publicUrl?: string; dataDirFlag?: string | undefined } = {}): string {
  const base = where.publicUrl ?? 'http://127.0.0.1:3000';
  const dataDir = where.dataDirFlag ? ` --data-dir ${JSON.stringify(where.dataDirFlag)}` : '';
  const lines = [
    `Initialised ${result.dataDir}`,
    `  workspace  ${printable(result.workspace.name)} (id ${result.workspace.id}, plan ${result.workspace.plan})`,
    `  owner      ${result.user.email} (super-admin)`,
  ];
  if (result.generatedPassword)
    lines.push(`  password   ${result.generatedPassword}   <- shown once; change it with: svc${dataDir} user passwd ${result.user.email} --password-stdin`);
  lines.push(
    '',
    'Log in:',
    `  curl -s -X POST ${base}/auth/login -H 'content-type: application/json' \\`,
    `    -d '{"email":"${result.user.email}","password":"<password>"}'`,
    'Mint an API key (VIEWER on the Starter plan; MEMBER and ADMIN need Growth or Pro):',
    `  svc${dataDir} keys create --workspace ${result.workspace.id} --role VIEWER --name my-key`,
  );
  return lines.join('\n');
}

export function registerInit(program: Command): void {
  program
    .command('init')
    .description('create the data folder, its config and database, the first workspace and its OWNER')
    .option('--yes', 'accept defaults without prompting')
    .option('--workspace <name>', 'name of the first workspace')
    .option('--email <email>', 'email of the OWNER user')
    .option('--password-stdin', 'read the OWNER password from standard input (otherwise one is generated)')
    .option('--plan <plan>', 'plan of the first workspace: STARTER, GROWTH or PRO', 'STARTER')
    .action(async (opts: { yes?: boolean; workspace?: string; email?: string; passwordStdin?: boolean; plan: string }, cmd: Command) => {
      const plan: Plan | undefined = parsePlan(opts.plan);
      if (!plan) throw new CliError(`unknown plan "${opts.plan}"; use STARTER, GROWTH or PRO`);
      let workspaceName = opts.workspace;
      let email = opts.email;
      let password = opts.passwordStdin ? await readSecretFromStdin() : undefined;
      if (interactive({ yes: opts.yes, json: globals(cmd).json })) {
        workspaceName ??= await input({ message: 'Workspace name', default: DEFAULT_WORKSPACE_NAME });
        email ??= await input({ message: 'Owner email', default: DEFAULT_OWNER_EMAIL });
        if (password === undefined) {
          const typed = await passwordPrompt({ message: 'Owner password (empty to generate one)', mask: '*' });
          password = typed || undefined;
        }
      }
      const result = await initialiseDataFolder(
        configFlags(cmd),
        process.env,
        { workspaceName: workspaceName ?? DEFAULT_WORKSPACE_NAME, email: email ?? DEFAULT_OWNER_EMAIL, password, plan },
        cliActor(),
      );
      output(
        cmd,
        {
          dataDir: result.dataDir,
          workspace: result.workspace,
          user: result.user,
          ...(result.generatedPassword ? { password: result.generatedPassword } : {}),
        },
        () => describeInit(result, { dataDirFlag: globals(cmd).dataDir, publicUrl: loadConfig({ dataDir: result.dataDir }).publicUrl }),
      );
    });
}
