import { and, eq, type SQL } from 'drizzle-orm';
import type { SQLiteColumn } from 'drizzle-orm/sqlite-core';
import type { Config } from './config.js';
import type { Db } from './db/connection.js';
import type { ActorType } from './db/schema.js';

/** Who did something: recorded in the audit trail with every state change. */
export interface Actor {
  type: ActorType;
  id: number | null;
  label: string | null;
}

/** What every service call needs outside a workspace. */
export interface SystemContext {
  db: Db;
  config: Config;
  actor: Actor;
  ip: string | null;
}

/** A service call inside one workspace: every query it makes is scoped by workspaceId. */
export interface WorkspaceContext extends SystemContext {
  workspaceId: number;
}

/**
 * The workspace predicate, joined with any further conditions. Services build their
 * WHERE clauses through this so that forgetting the workspace scope takes effort.
 */
export function inWorkspace(ctx: { workspaceId: number }, column: SQLiteColumn, ...conditions: (SQL | undefined)[]): SQL {
  return and(eq(column, ctx.workspaceId), ...conditions) as SQL;
}

export function nowIso(): string {
  return new Date().toISOString();
}

/**
 * Runs fn in one IMMEDIATE transaction (taking the write lock up front avoids
 * SQLITE_BUSY on lock upgrade when several processes share the file). Nested calls
 * become savepoints. The callback gets the same context bound to the transaction.
 */
export function withTransaction<C extends { db: Db }, T>(ctx: C, fn: (tx: C) => T): T {
  return ctx.db.transaction((tx) => fn({ ...ctx, db: tx as unknown as Db }), { behavior: 'immediate' });
}
