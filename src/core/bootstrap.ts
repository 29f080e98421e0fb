import { existsSync } from 'node:fs';
import {
  ConfigError,
  databaseUrlOf,
  isInitialised,
  loadConfig,
  resolveDataDir,
  writeInitialConfig,
  writeNodeConfig,
  type Config,
  type ConfigFlags,
} from './config.js';
import type { Actor } from './context.js';
import { openDatabase, type Db } from './db/connection.js';
import { openPgStore, openSqliteStore, type SqliteStore, type Store } from './db/store.js';
import { migratePg, pgMigrationStatus } from './db/pgMigrate.js';
import { migrate, migrationStatus, type MigrationStatus } from './db/migrate.js';
import { workspaces, type Plan } from './db/schema.js';
import { generatePassword } from './crypto.js';
import { createUser, requireEmail } from './services/users.js';
import { createWorkspace, validateWorkspaceName } from './services/workspaces.js';
import { ConflictError, ValidationError } from './errors.js';
import { passwordProblem } from './validation.js';

export interface InitInput {
  workspaceName: string;
  email: string;
  password?: string | undefined;
  plan?: Plan | undefined;
}

export interface InitResult {
  dataDir: string;
  workspace: { id: number; name: string; plan: Plan };
  user: { id: number; email: string };
  /** Set only when the password was generated: it is shown to the operator once. */
  generatedPassword?: string;
  migrations: MigrationStatus;
}

export const DEFAULT_OWNER_EMAIL = 'admin@svc.local';
export const DEFAULT_WORKSPACE_NAME = 'Default';

/**
 * openMigrated and openCurrent open the data folder's SQLite file: a config that selects
 * PostgreSQL reaching them is a mistake of the caller (openStore and openCurrentStore choose).
 */
function assertSqliteConfig(config: Config): void {
  if (config.databaseUrl) throw new Error('this config selects PostgreSQL (databaseUrl): open it with openStore or openCurrentStore, not as the SQLite file');
}

function pendingMigrations(count: number): Error {
  return new Error(`The database has ${count} pending migration(s); run "svc migrate" first`);
}

/**
 * Opens the configured store, applying pending migrations: PostgreSQL when databaseUrl is
 * set (under the migration lock, so nodes starting together never race), else the data
 * folder's SQLite file.
 */
export async function openStore(config: Config, onApply?: (tag: string) => void): Promise<{ store: Store; applied: string[] }> {
  if (!config.databaseUrl) return openMigrated(config, onApply);
  const { applied } = await migratePg(config.databaseUrl, onApply ? { onApply } : {});
  return { store: openPgStore(config.databaseUrl), applied };
}

/** Opens the data folder's database, applying pending migrations. */
export function openMigrated(config: Config, onApply?: (tag: string) => void): { store: SqliteStore; applied: string[] } {
  assertSqliteConfig(config);
  const db = openDatabase(config.dbFile, { synchronous: config.dbSynchronous });
  let applied: string[];
  try {
    applied = migrate(db, undefined, onApply).applied;
  } finally {
    db.$client.close();
  }
  return { store: openSqliteStore(config.dbFile, { synchronous: config.dbSynchronous }), applied };
}

/** Opens the configured store (PostgreSQL or the data folder's SQLite) and refuses one that needs migrating. */
export async function openCurrentStore(config: Config): Promise<Store> {
  if (!config.databaseUrl) return openCurrent(config);
  const { pending } = await pgMigrationStatus(config.databaseUrl);
  if (pending.length) throw pendingMigrations(pending.length);
  return openPgStore(config.databaseUrl);
}

/** Opens an initialised data folder's database and refuses one that needs migrating. */
export function openCurrent(config: Config): SqliteStore {
  assertSqliteConfig(config);
  const db = openDatabase(config.dbFile, { synchronous: config.dbSynchronous });
  try {
    const { pending } = migrationStatus(db);
    if (pending.length) throw pendingMigrations(pending.length);
  } finally {
    db.$client.close();
  }
  return openSqliteStore(config.dbFile, { synchronous: config.dbSynchronous });
}

async function storeHasWorkspace(store: Store): Promise<boolean> {
  return (await store.db.select({ id: workspaces.id }).from(workspaces).limit(1)).length > 0;
}

/** Asked before migrating, so it names no column a later migration adds. */
function hasWorkspace(db: Db): boolean {
  return db.$client.prepare('SELECT 1 FROM workspaces LIMIT 1').get() !== undefined;
}

/**
 * True for an empty (or half-initialised) data folder: no config, no database, or no
 * workspace yet (on PostgreSQL: no workspace in the database the config names).
 */
export async function needsInitialisation(flags: ConfigFlags, env: NodeJS.ProcessEnv): Promise<boolean> {
  const dataDir = resolveDataDir(flags.dataDir, env);
  if (!isInitialised(dataDir)) return !(await joinsInitialisedDatabase(dataDir, flags, env));
  const config = loadConfig(flags, env);
  if (config.databaseUrl) {
    const { applied } = await pgMigrationStatus(config.databaseUrl);
    if (!applied.length) return true;
    const store = openPgStore(config.databaseUrl, { poolSize: 1 });
    try {
      return !(await storeHasWorkspace(store));
    } finally {
      await store.close();
    }
  }
  if (!existsSync(config.dbFile)) return true;
  const db = openDatabase(config.dbFile, { synchronous: config.dbSynchronous });
  try {
    const tables = db.$client.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'workspaces'").get();
    return !tables || !hasWorkspace(db);
  } finally {
    db.$client.close();
  }
}

/**
 * Another node of a cluster: an empty data folder, and a PostgreSQL database (flag or
 * environment) that another node has initialised. The node needs the cluster's secrets, from
 * the environment (SVC_JWT_SECRET, SVC_ENCRYPTION_KEY): then its folder gets a config.json
 * without secrets of its own, and it serves. Without them it is refused, since secrets
 * generated here could neither decrypt the stored data nor accept the other nodes' tokens.
 */
async function joinsInitialisedDatabase(dataDir: string, flags: ConfigFlags, env: NodeJS.ProcessEnv): Promise<boolean> {
  const url = flags.databaseUrl ?? env.SVC_DATABASE_URL;
  if (!url) return false;
  // Validates the URL as the config does (a ConfigError names what is wrong).
  const databaseUrl = databaseUrlOf(url);
  if (!(await pgMigrationStatus(databaseUrl)).applied.length) return false;
  const store = openPgStore(databaseUrl, { poolSize: 1 });
  try {
    if (!(await storeHasWorkspace(store))) return false;
  } finally {
    await store.close();
  }
  if (!env.SVC_JWT_SECRET || !env.SVC_ENCRYPTION_KEY) {
    throw new ConfigError(
      `the database is already initialised by another node, and ${dataDir} has no config.json: give this node the cluster's secrets ` +
        "(SVC_JWT_SECRET and SVC_ENCRYPTION_KEY, the same on every node) or a copy of the first node's config.json",
    );
  }
  writeNodeConfig(dataDir);
  return true;
}

/**
 * Creates the data folder, its config (with generated secrets), the database, and the first
 * workspace with its OWNER, who is also super-admin. Refuses a folder that already has one.
 */
export async function initialiseDataFolder(flags: ConfigFlags, env: NodeJS.ProcessEnv, input: InitInput, actor: Actor): Promise<InitResult> {
  // Check what the operator typed before anything is written.
  requireEmail(input.email);
  validateWorkspaceName(input.workspaceName);
  const problem = input.password === undefined ? undefined : passwordProblem(input.password);
  if (problem) throw new ValidationError('invalid_password', `The password ${problem}`);
  writeInitialConfig(resolveDataDir(flags.dataDir, env));
  const config = loadConfig(flags, env);
  const { store, applied } = await openStore(config);
  try {
    if (await storeHasWorkspace(store)) throw new ConflictError('already_initialised', `${config.dataDir} is already initialised`);
    const password = input.password ?? generatePassword();
    const ctx = { db: store.db, store, config, actor, ip: null };
    const workspace = await createWorkspace(ctx, { name: input.workspaceName, ...(input.plan ? { plan: input.plan } : {}) });
    const user = await createUser(ctx, { email: input.email, password, workspaceId: workspace.id, role: 'OWNER', isSuperAdmin: true });
    return {
      dataDir: config.dataDir,
      workspace: { id: workspace.id, name: workspace.name, plan: workspace.plan },
      user: { id: user.id, email: user.email },
      ...(input.password === undefined ? { generatedPassword: password } : {}),
      migrations: { applied, pending: [] },
    };
  } finally {
    await store.close();
  }
}
