/** Data the console tests set up directly, through the services (not the page under test). */
import type { Role } from '../../src/core/db/schema.js';
import { memberships } from '../../src/core/db/schema.js';
import { createWorkspace } from '../../src/core/services/workspaces.js';
import type { TestServer } from '../helpers.js';

type Seedable = Pick<TestServer, 'db' | 'config'>;

const system = (s: Seedable) => ({ db: s.db, config: s.config, actor: { type: 'SYSTEM' as const, id: null, label: 'test' }, ip: null });

/** A new workspace (its id). */
export function addWorkspace(s: Seedable, name: string): number {
  return createWorkspace(system(s), { name, plan: 'PRO' }).id;
}

/** Makes a user a member of another workspace. */
export function addMembership(s: Seedable, workspaceId: number, userId: number, role: Role): void {
  s.db.insert(memberships).values({ workspaceId, userId, role }).run();
}
