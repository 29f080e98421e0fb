/**
 * The server the console's browser tests drive: a real `svc serve` process on 127.0.0.1, as a
 * self-hoster runs it, serving the console built from the current sources. The data folder is
 * initialised by the same code as `svc init`; the test also opens its SQLite file to seed data
 * through the services (the server sees those writes as another process would).
 */
import type { TestContext } from 'node:test';
import { initialiseDataFolder, openMigrated } from '../../src/core/bootstrap.js';
import { loadConfig } from '../../src/core/config.js';
import type { Plan } from '../../src/core/db/schema.js';
import { startServe, tempDir } from '../cli/helpers.js';
import { OWNER_PASSWORD, serverHandle, type TestServer } from '../helpers.js';
import { ensureConsoleBuilt } from './browser.js';

export interface ConsoleServer extends Omit<TestServer, 'app'> {
  /** Stops the server (SIGTERM) and waits for it to exit. */
  stop(): Promise<void>;
  /** What the server printed so far. */
  output(): string;
}

/**
 * A fresh data folder (workspace "Acme", its OWNER) and `svc serve` on it, listening on a free
 * port; `engine` runs workflow runs in it (default off, like an ingest-only node). Stopped and
 * deleted after the test.
 */
export async function consoleServer(
  t: TestContext,
  opts: { engine?: boolean; plan?: Plan; env?: NodeJS.ProcessEnv } = {},
): Promise<{ s: ConsoleServer; token: string }> {
  const consoleDir = await ensureConsoleBuilt();
  const dataDir = tempDir(t, 'svc-console-');
  const env: NodeJS.ProcessEnv = { SVC_ENGINE: opts.engine ? 'true' : 'false', SVC_CONSOLE_DIR: consoleDir, SVC_LOG_FORMAT: 'json', ...(opts.env ?? {}) };
  const init = await initialiseDataFolder(
    { dataDir },
    {},
    { workspaceName: 'Acme', email: 'owner@acme.test', password: OWNER_PASSWORD, plan: opts.plan ?? 'PRO' },
    { type: 'SYSTEM', id: null, label: 'test' },
  );
  const config = loadConfig({ dataDir }, {});
  const { store } = openMigrated(config);
  t.after(() => store.close());
  const serve = await startServe(t, dataDir, ['--host', '127.0.0.1', '--port', '0'], { env });
  const address = serve.url.replace(/\/$/, '');
  const server: ConsoleServer = {
    ...serverHandle({ url: address, store, config, dataDir, init }),
    async stop() {
      await serve.stop();
    },
    output: () => serve.stdout() + serve.stderr(),
  };
  return { s: server, token: await server.login(server.owner.email, OWNER_PASSWORD) };
}
