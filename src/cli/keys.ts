import type { Command } from 'commander';
import { parseRole } from '../core/roles.js';
import { getWorkspace } from '../core/services/workspaces.js';
import { apiKeyWorkspaceId, listApiKeys, mintApiKey, revokeApiKey, type ApiKeyView } from '../core/services/apiKeys.js';
import { MAX_LIMIT } from '../core/pagination.js';
import type { WorkspaceContext } from '../core/context.js';
import { allPages, CliError, output, parseId, printable, table, withSession } from './io.js';

function allKeys(ctx: WorkspaceContext): Promise<ApiKeyView[]> {
  return allPages((cursor) => listApiKeys(ctx, { limit: MAX_LIMIT, cursor }));
}

export function registerKeys(program: Command): void {
  const keys = program.command('keys').description('mint, list and revoke API keys');

  keys
    .command('create')
    .description('mint an API key (the raw key is shown once)')
    .requiredOption('--workspace <id>', 'workspace id')
    .requiredOption('--role <role>', 'VIEWER, MEMBER or ADMIN')
    .requiredOption('--name <name>', 'a name to recognise the key by')
    .action((opts: { workspace: string; role: string; name: string }, cmd: Command) => {
      const role = parseRole(opts.role);
      if (!role) throw new CliError(`unknown role "${opts.role}"; use VIEWER, MEMBER or ADMIN`);
      const workspaceId = parseId(opts.workspace, 'workspace id');
      return withSession(cmd, async ({ inWorkspace }) => {
        const k = await mintApiKey(inWorkspace(workspaceId), { name: opts.name, role });
        output(cmd, { id: k.id, name: k.name, role: k.role, key: k.key, prefix: k.prefix }, () =>
          [
            `minted key ${k.id} "${printable(k.name)}" (${k.role}) for workspace ${workspaceId}`,
            '',
            `  ${k.key}`,
            '',
            'Store it now: it is shown once and cannot be recovered.',
          ].join('\n'),
        );
      });
    });

  keys
    .command('list')
    .description("list a workspace's API keys")
    .requiredOption('--workspace <id>', 'workspace id')
    .action((opts: { workspace: string }, cmd: Command) =>
      withSession(cmd, async ({ ctx, inWorkspace }) => {
        const workspaceId = parseId(opts.workspace, 'workspace id');
        await getWorkspace(ctx, workspaceId); // "No workspace with id N", as every command says
        const all = await allKeys(inWorkspace(workspaceId));
        output(cmd, all, () => table(all as unknown as Record<string, unknown>[], ['id', 'name', 'role', 'prefix', 'createdAt', 'lastUsedAt', 'revokedAt']));
      }),
    );

  keys
    .command('revoke')
    .description('revoke an API key (every server refuses it from the next request)')
    .argument('<keyId>', 'key id')
    .action((keyId: string, _opts: unknown, cmd: Command) =>
      withSession(cmd, async ({ ctx, inWorkspace }) => {
        const id = parseId(keyId, 'key id');
        const k = await revokeApiKey(inWorkspace(await apiKeyWorkspaceId(ctx, id)), id);
        output(cmd, { id: k.id, revokedAt: k.revokedAt }, `revoked key ${k.id} "${printable(k.name)}" at ${k.revokedAt}`);
      }),
    );
}
