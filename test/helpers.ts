import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { initialiseDataFolder, openStore } from '../src/core/bootstrap.js';
import { loadConfig, type Config } from '../src/core/config.js';
import type { Db } from '../src/core/db/connection.js';
import type { SQL } from 'drizzle-orm';
import { queryRows } from '../src/core/db/dialect.js';
import { findMigrationsDir, readJournal } from '../src/core/db/migrate.js';
import { findPgMigrationsDir } from '../src/core/db/pgMigrate.js';
import { isSqliteStore, type SqliteStore, type Store } from '../src/core/db/store.js';
import { createMigratedDatabase } from './pg.js';
import type { WorkspaceContext } from '../src/core/context.js';
import type { Plan, Role } from '../src/core/db/schema.js';
import { mintApiKey } from '../src/core/services/apiKeys.js';
import { createUser } from '../src/core/services/users.js';
import { createWorkspace } from '../src/core/services/workspaces.js';
import { buildApp, type App, type AppDeps } from '../src/server/app.js';
import { reservePort } from '../src/cli/serve.js';
import type { EngineOptions } from '../src/engine/scheduler.js';
import { setPasswordHashCost } from '../src/core/crypto.js';

// Servers built in a test process hash passwords at scrypt's N=2^10, not the product's 2^15:
// the suite logs in thousands of times. `svc` itself (the CLI tests, the console's servers)
// hashes at the product's cost, which test/cli/init.test.ts checks in the stored hash.
setPasswordHashCost(1024);

export const OWNER_PASSWORD = 'owner-password-1';

/**
 * The store the test servers run on: SQLite (the default), or PostgreSQL with
 * SVC_TEST_STORE=pg (`npm run test:pg` runs the service suites that way), each server on a
 * database of its own on SVC_TEST_DATABASE_URL's server.
 */
export function testStore(): 'sqlite' | 'pg' {
  const store = process.env.SVC_TEST_STORE ?? 'sqlite';
  if (store !== 'sqlite' && store !== 'pg') throw new Error(`SVC_TEST_STORE must be sqlite or pg, not ${store}`);
  return store;
}

export function tempDir(t: TestContext, prefix = 'svc-test-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export interface HttpResult {
  status: number;
  headers: Headers;
  body: any;
  text: string;
}

export interface RequestOptions {
  token?: string | undefined;
  body?: unknown;
  /** Sent as-is instead of JSON-encoding `body`. */
  raw?: string | Buffer;
  headers?: Record<string, string>;
}

export interface TestServer {
  url: string;
  app: App;
  /** Reads; read-only outside a transaction (write through store.transaction, the services or the API). */
  db: Db;
  store: Store;
  config: Config;
  dataDir: string;
  workspaceId: number;
  owner: { id: number; email: string; password: string };
  request(method: string, path: string, opts?: RequestOptions): Promise<HttpResult>;
  login(email: string, password: string, workspaceId?: number): Promise<string>;
  /** A fresh user with this role in the workspace (default: the main one), logged in. */
  userWithRole(role: Role, workspaceId?: number): Promise<{ id: number; email: string; password: string; token: string }>;
  /** A fresh workspace with its own OWNER, logged in. */
  otherWorkspace(plan?: Plan): Promise<{ workspaceId: number; token: string }>;
  /** Mints a key directly through the service (bypassing plan rules only where noted by the caller). */
  mintKey(role: Exclude<Role, 'OWNER'>, workspaceId?: number): Promise<string>;
  /** A service context for the workspace (default: the main one), acting as the system. */
  ctx(workspaceId?: number): WorkspaceContext;
}

let userCounter = 0;

export async function request(base: string, method: string, path: string, opts: RequestOptions = {}): Promise<HttpResult> {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  let body: string | Buffer | undefined;
  if (opts.raw !== undefined) body = opts.raw;
  else if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers['content-type'] ??= 'application/json';
  }
  const res = await fetch(base + path, { method, headers, ...(body !== undefined ? { body: body as unknown as string } : {}) });
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  return { status: res.status, headers: res.headers, body: parsed, text };
}

/** The rows of a raw query on a test server's store, in SQL both dialects understand. */
export function rowsOf<T extends Record<string, unknown>>(s: { store: Store }, query: SQL): Promise<T[]> {
  return queryRows<T>(s.store, s.store.db, query);
}

/** The first column of the first row of a raw query, as a number (counts, sums, lengths). */
export async function scalarOf(s: { store: Store }, query: SQL): Promise<number | null> {
  const [row] = await rowsOf(s, query);
  const value = row ? Object.values(row)[0] : null;
  return value === null || value === undefined ? null : Number(value);
}

/** The schema version this build carries for the test server's store (what /healthz reports once migrated). */
export function carriedSchemaVersionOf(s: { store: Store }): string {
  const dir = s.store.dialect === 'pg' ? findPgMigrationsDir() : findMigrationsDir();
  return readJournal(dir).at(-1)!.tag;
}

/** The SQLite store of a test server, for tests of what only SQLite has (its writer connection, its file). */
export function sqliteStoreOf(s: { store: Store }): SqliteStore {
  if (!isSqliteStore(s.store)) throw new Error('this test needs the SQLite store');
  return s.store;
}

/**
 * A fresh server for one test: a new data folder with its own SQLite file, the first
 * workspace and OWNER created by the same code as `svc init`, and a real Fastify server
 * listening on 127.0.0.1. Everything is closed and deleted after the test.
 */
export async function build(
  t: TestContext,
  opts: {
    plan?: Plan;
    env?: NodeJS.ProcessEnv;
    engine?: boolean | EngineOptions;
    onRoute?: AppDeps['onRoute'];
    /** 'sqlite': a test of what only SQLite has (its query plans, its file), on SQLite under SVC_TEST_STORE=pg too. */
    store?: 'sqlite';
  } = {},
): Promise<TestServer> {
  const dataDir = tempDir(t);
  const env = { ...(opts.env ?? {}) };
  // SVC_TEST_STORE=pg: the same server on a database of its own on the PostgreSQL test server.
  let dropDatabase: (() => Promise<void>) | undefined;
  if (testStore() === 'pg' && opts.store !== 'sqlite') {
    const database = await createMigratedDatabase();
    env.SVC_DATABASE_URL = database.url;
    dropDatabase = database.drop;
  }
  const init = await initialiseDataFolder(
    { dataDir },
    env,
    { workspaceName: 'Acme', email: 'owner@acme.test', password: OWNER_PASSWORD, plan: opts.plan ?? 'PRO' },
    { type: 'SYSTEM', id: null, label: 'test' },
  );
  // The port stays bound until the server listens there: no other test's connection takes it meanwhile.
  const port = await reservePort('127.0.0.1');
  const config = loadConfig({ dataDir, port: port.port }, env);
  const { store } = await openStore(config);
  const app = await buildApp({
    config,
    store,
    logger: false,
    ...(opts.engine ? { engine: opts.engine } : {}),
    ...(opts.onRoute ? { onRoute: opts.onRoute } : {}),
  });
  await port.release();
  const address = await app.listen({ host: '127.0.0.1', port: config.port });
  const nodes: (() => Promise<void>)[] = [];
  t.after(async () => {
    // The nodes that joined it first: they share its database.
    for (const close of nodes.reverse()) await close();
    await app.close();
    await store.close();
    // Dropped once nothing uses it (a drop ends the connections still open).
    await dropDatabase?.();
  });
  const server = { app, ...serverHandle({ url: address, store, config, dataDir, init }) };
  joinedNodes.set(server, nodes);
  return server;
}

const joinedNodes = new WeakMap<TestServer, (() => Promise<void>)[]>();

/**
 * Another node of `first`'s cluster: a second server in this process on the same data folder
 * (so the same secrets) and the same database, with settings of its own (`env`, such as a
 * Redis URL, and whether it runs an engine). Closed before `first`.
 */
export async function joinNode(first: TestServer, opts: { env?: NodeJS.ProcessEnv; engine?: boolean | EngineOptions } = {}): Promise<TestServer> {
  const nodes = joinedNodes.get(first);
  if (!nodes) throw new Error('joinNode: the first node was not made by build()');
  const env = { ...(opts.env ?? {}), ...(first.config.databaseUrl ? { SVC_DATABASE_URL: first.config.databaseUrl } : {}) };
  const port = await reservePort('127.0.0.1');
  const config = loadConfig({ dataDir: first.dataDir, port: port.port }, env);
  const { store } = await openStore(config);
  const app = await buildApp({ config, store, logger: false, ...(opts.engine ? { engine: opts.engine } : {}) });
  await port.release();
  const address = await app.listen({ host: '127.0.0.1', port: config.port });
  nodes.push(async () => {
    await app.close();
    await store.close();
  });
  const init = { workspace: { id: first.workspaceId }, user: { id: first.owner.id, email: first.owner.email } };
  return { app, ...serverHandle({ url: address, store, config, dataDir: first.dataDir, init }) };
}

/**
 * What a test does with a running server, whether in this process or a `svc serve` child: requests,
 * logins, and seeding through the services on the same SQLite file.
 */
export function serverHandle(opts: {
  url: string;
  store: Store;
  config: Config;
  dataDir: string;
  init: { workspace: { id: number }; user: { id: number; email: string } };
}): Omit<TestServer, 'app'> {
  const { url: address, store, config, dataDir, init } = opts;
  const ctx = { db: store.db, store, config, actor: { type: 'SYSTEM' as const, id: null, label: 'test' }, ip: null };
  const server: Omit<TestServer, 'app'> = {
    url: address,
    db: store.db,
    store,
    config,
    dataDir,
    workspaceId: init.workspace.id,
    owner: { id: init.user.id, email: init.user.email, password: OWNER_PASSWORD },
    request: (method, path, o) => request(address, method, path, o),
    async login(email, password, workspaceId) {
      const res = await request(address, 'POST', '/auth/login', { body: { email, password, ...(workspaceId ? { workspaceId } : {}) } });
      if (res.status !== 200) throw new Error(`login failed: ${res.status} ${res.text}`);
      return res.body.token as string;
    },
    async userWithRole(role, workspaceId = init.workspace.id) {
      const email = `user${++userCounter}-${role.toLowerCase()}@acme.test`;
      const password = `password-${userCounter}-x`;
      const u = await createUser(ctx, { email, password, workspaceId, role });
      return { id: u.id, email, password, token: await server.login(email, password, workspaceId) };
    },
    async otherWorkspace(plan = 'PRO') {
      const ws = await createWorkspace(ctx, { name: `Other ${++userCounter}`, plan });
      const u = await server.userWithRole('OWNER', ws.id);
      return { workspaceId: ws.id, token: u.token };
    },
    async mintKey(role, workspaceId = init.workspace.id) {
      return (await mintApiKey({ ...ctx, workspaceId }, { name: `${role.toLowerCase()} key`, role })).key;
    },
    ctx: (workspaceId = init.workspace.id) => ({ ...ctx, workspaceId }),
  };
  return server;
}

/**
 * Asserts an RFC 9457 problem response: the status, problem+json, the standard members,
 * a snake_case code (the given one when named), and no stack trace or SQL in the body.
 */
export function assertProblem(res: HttpResult, status: number, code?: string): void {
  const text = res.text.slice(0, 500);
  assert.equal(res.status, status, `expected ${status}, got ${res.status}: ${text}`);
  assert.match(res.headers.get('content-type') ?? '', /^application\/problem\+json/, `content-type of ${res.status}: ${res.headers.get('content-type')}`);
  const b = res.body;
  assert.ok(b && typeof b === 'object', `problem body is JSON: ${text}`);
  assert.equal(b.type, 'about:blank');
  assert.ok(typeof b.title === 'string' && b.title.length > 0, 'title');
  assert.equal(b.status, status);
  assert.match(String(b.code), /^[a-z][a-z0-9_]*$/, 'code is snake_case');
  assert.equal(typeof b.detail, 'string');
  if (code !== undefined) assert.equal(b.code, code, `code: ${text}`);
  assert.doesNotMatch(res.text, /\bat .*\.(ts|js):\d+|SQLITE|sqlite_|stack/i, 'no stack traces or SQL');
}

/** Polls GET /runs/:id until the run reaches one of the statuses (or fails the test). */
export async function waitForRun(s: Pick<TestServer, 'request'>, token: string, runId: number, statuses: string[], timeoutMs = 15_000): Promise<any> {
  const started = Date.now();
  for (;;) {
    const res = await s.request('GET', `/runs/${runId}`, { token });
    assert.equal(res.status, 200, res.text);
    if (statuses.includes(res.body.status)) return res.body;
    if (Date.now() - started > timeoutMs) assert.fail(`run ${runId} is ${res.body.status} after ${timeoutMs} ms: ${res.text}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * An ACTIVE webhook workflow with these steps, looking its contact up by the body's `email`
 * and creating it when missing; answers its webhook's path.
 */
export async function webhookWorkflow(s: Pick<TestServer, 'request'>, token: string, name: string, steps: unknown[]): Promise<string> {
  return (await webhookWorkflowOf(s, token, name, steps)).path;
}

/** webhookWorkflow's workflow: its id and its webhook's path. */
export async function webhookWorkflowOf(s: Pick<TestServer, 'request'>, token: string, name: string, steps: unknown[]): Promise<{ id: number; path: string }> {
  const wf = await s.request('POST', '/workflows', {
    token,
    body: { name, triggerSource: 'WEBHOOK', status: 'ACTIVE', steps, webhook: { lookup: 'email', path: 'email', createIfNotFound: true } },
  });
  assert.equal(wf.status, 201, wf.text);
  return { id: wf.body.id, path: new URL(wf.body.webhook.url).pathname };
}

/** A fresh server (see build) and its OWNER's access token. */
export async function buildAsOwner(t: TestContext, opts: Parameters<typeof build>[1] = {}): Promise<{ s: TestServer; token: string }> {
  const s = await build(t, opts);
  return { s, token: await s.login(s.owner.email, s.owner.password) };
}

/** Deterministic PRNG (mulberry32) so that a failing fuzz case can be reproduced. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
