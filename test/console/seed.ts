/** Data the console tests set up directly, through the services (not the page under test). */
import type { Role } from '../../src/core/db/schema.js';
import { memberships } from '../../src/core/db/schema.js';
import { createWorkspace } from '../../src/core/services/workspaces.js';
import type { TestServer } from '../helpers.js';

type Seedable = Pick<TestServer, 'db' | 'store' | 'config'>;

const system = (s: Seedable) => ({ db: s.db, store: s.store, config: s.config, actor: { type: 'SYSTEM' as const, id: null, label: 'test' }, ip: null });

/** A new workspace (its id). */
export async function addWorkspace(s: Seedable, name: string): Promise<number> {
  return (await createWorkspace(system(s), { name, plan: 'PRO' })).id;
}

/** Makes a user a member of another workspace. */
export async function addMembership(s: Seedable, workspaceId: number, userId: number, role: Role): Promise<void> {
  await s.store.transaction((tx) => tx.insert(memberships).values({ workspaceId, userId, role }));
}
