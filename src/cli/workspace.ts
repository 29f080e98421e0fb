import type { Command } from 'commander';
import type { Plan } from '../core/db/schema.js';
import { parsePlan } from '../core/roles.js';
import { createWorkspace, getWorkspace, listWorkspaces, setWorkspacePlan, type WorkspaceView } from '../core/services/workspaces.js';
import { ensureSandbox } from '../core/services/sandbox.js';
import { CliError, output, parseId, printable, table, withSession } from './io.js';

export function requirePlan(value: string): Plan {
  const plan = parsePlan(value);
  if (!plan) throw new CliError(`unknown plan "${value}"; use STARTER, GROWTH or PRO`);
  return plan;
}

const describe = (w: WorkspaceView) => `workspace ${w.id}: ${printable(w.name)} (plan ${w.plan}, created ${w.createdAt})`;

export function registerWorkspace(program: Command): void {
  const ws = program.command('workspace').description('create, list and inspect workspaces');

  ws.command('create')
    .description('create a workspace')
    .requiredOption('--name <name>', 'workspace name')
    .option('--plan <plan>', 'STARTER, GROWTH or PRO', 'STARTER')
    .action((opts: { name: string; plan: string }, cmd: Command) =>
      withSession(cmd, async ({ ctx }) => {
        const w = await createWorkspace(ctx, { name: opts.name, plan: requirePlan(opts.plan) });
        output(cmd, w, () => `created ${describe(w)}`);
      }),
    );

  ws.command('list')
    .description('list workspaces')
    .action((_opts: unknown, cmd: Command) =>
      withSession(cmd, async ({ ctx }) => {
        const all = await listWorkspaces(ctx);
        output(cmd, all, () => table(all as unknown as Record<string, unknown>[], ['id', 'name', 'plan', 'sandboxOf', 'createdAt']));
      }),
    );

  ws.command('show')
    .description('show one workspace')
    .argument('<id>', 'workspace id')
    .action((id: string, _opts: unknown, cmd: Command) =>
      withSession(cmd, async ({ ctx }) => {
        const w = await getWorkspace(ctx, parseId(id, 'workspace id'));
        output(cmd, w, () => describe(w));
      }),
    );

  ws.command('sandbox')
    .description("create the workspace's sandbox (svc_test_ keys, nothing leaves the machine), or show it; --reset deletes its data")
    .argument('<id>', 'workspace id (a sandbox id acts on that sandbox)')
    .option('--reset', 'delete every contact, template, workflow, automation, run and delivery of the sandbox (its id and keys stay)')
    .action((id: string, opts: { reset?: boolean }, cmd: Command) =>
      withSession(cmd, async ({ ctx }) => {
        const { sandbox, created, reset } = await ensureSandbox(ctx, parseId(id, 'workspace id'), { reset: opts.reset === true });
        const what = created ? 'created' : reset ? 'reset' : 'exists:';
        output(cmd, { ...sandbox, created, reset }, () =>
          [
            `${what} sandbox workspace ${sandbox.id} of workspace ${sandbox.liveWorkspaceId} (plan ${sandbox.plan})`,
            `base URL ${sandbox.baseUrl}; mint its svc_test_ keys with: svc keys create --workspace ${sandbox.id} --role ADMIN --name NAME`,
          ].join('\n'),
        );
      }),
    );

  ws.command('set-plan')
    .description("change a workspace's plan")
    .argument('<id>', 'workspace id')
    .argument('<plan>', 'STARTER, GROWTH or PRO')
    .action((id: string, plan: string, _opts: unknown, cmd: Command) =>
      withSession(cmd, async ({ ctx }) => {
        const w = await setWorkspacePlan(ctx, parseId(id, 'workspace id'), requirePlan(plan));
        output(cmd, w, () => `${describe(w)}`);
      }),
    );
}
