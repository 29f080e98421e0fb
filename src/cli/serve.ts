import { createServer, type AddressInfo } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import type { Command } from 'commander';
import { DEFAULT_OWNER_EMAIL, DEFAULT_WORKSPACE_NAME, initialiseDataFolder, needsInitialisation, openStore, type InitResult } from '../core/bootstrap.js';
import { loadConfig, resolveDataDir, type Config, type ConfigFlags } from '../core/config.js';
import { startBackupSchedule, type BackupSchedule } from '../core/services/backupSchedule.js';
import { acquireServeLock } from '../core/serverLock.js';
import { checkStoredSecrets, joinCluster, type NodeMembership } from '../core/cluster.js';
import { describeInit } from './init.js';
import { cliActor, configFlags, globals } from './io.js';

/** A port the OS says is free on this host right now. */
export function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, host, () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

/**
 * What `svc serve --json` prints once it listens: where it is, and on a folder it has just
 * initialised, the generated owner (the only time that password is shown).
 */
export function startLine(url: string, config: Config, initialised: InitResult | undefined) {
  return {
    url,
    publicUrl: config.publicUrl,
    dataDir: config.dataDir,
    pid: process.pid,
    ...(initialised ? { initialised: true as const, owner: { email: initialised.user.email, password: initialised.generatedPassword ?? null } } : {}),
  };
}

/**
 * How far V8 lets a heap grow past what its last full collection kept: 1.5x by default
 * (heapGrowthPercent 50), instead of up to 4x while collections are cheap, as they are for a
 * server whose live data is a few tens of MB. Otherwise garbage that outlives the young
 * generation (an import's batches, runs in flight) piles up to several times the live heap
 * before it is collected: a million-contact import peaked near 300 MB RSS, and at about
 * 215 MB with this bound, in the same time (README, bench:scale). V8's flags are the process's, so
 * this applies to the engine's threads too; it is set before they start.
 */
export function boundHeapGrowth(config: Pick<Config, 'heapGrowthPercent'>): void {
  if (config.heapGrowthPercent > 0) setFlagsFromString(`--heap-growing-percent=${config.heapGrowthPercent}`);
}

export function registerServe(program: Command): void {
  program
    .command('serve')
    .description('run the HTTP server (initialises and migrates an empty data folder)')
    .option('--host <host>', 'address to listen on (default 127.0.0.1)')
    .option('--port <port>', 'port to listen on (default 3000)')
    .option('--metrics-port <port>', 'also serve GET /metrics on 127.0.0.1:<port>, without a token (default $SVC_METRICS_PORT, else none)')
    .action(async (opts: { host?: string; port?: string; metricsPort?: string }, cmd: Command) => {
      const flags: ConfigFlags = {
        ...configFlags(cmd),
        ...(opts.host ? { host: opts.host } : {}),
        ...(opts.port ? { port: opts.port } : {}),
        ...(opts.metricsPort ? { metricsPort: opts.metricsPort } : {}),
      };
      // --json: one line on stdout for the script that started us; logs go to stderr.
      const json = globals(cmd).json === true;
      // A pid file under <dataDir>/locks while this server runs: "svc restore" refuses meanwhile.
      const serveLock = acquireServeLock(resolveDataDir(flags.dataDir, process.env));
      let config: Config | undefined;
      let initialised: InitResult | undefined;
      const withPort = async () => {
        const loaded = loadConfig(flags);
        // Pick the port now so that publicUrl (and so webhook URLs) name the real one.
        if (loaded.port === 0) flags.port = await freePort(loaded.host);
        return loadConfig(flags);
      };
      if (await needsInitialisation(flags, process.env)) {
        initialised = await initialiseDataFolder(flags, process.env, { workspaceName: DEFAULT_WORKSPACE_NAME, email: DEFAULT_OWNER_EMAIL }, cliActor());
        config = await withPort();
        if (!json) process.stdout.write(`${describeInit(initialised, { publicUrl: config.publicUrl, dataDirFlag: globals(cmd).dataDir })}\n\n`);
      }
      config ??= await withPort();
      boundHeapGrowth(config);
      const { store, applied } = await openStore(config, (tag) => process.stderr.write(`applied migration ${tag}\n`));
      const cfg = config;
      // Loaded here, not at the top: the other commands need none of the HTTP server.
      const { buildApp } = await import('../server/app.js');
      // Refused before serving: keys that cannot decrypt the stored data, or a node that may not
      // join the others on this database (core/cluster.ts). Nothing is left open.
      let membership: NodeMembership | undefined;
      const app = await (async () => {
        await checkStoredSecrets(store, cfg);
        const built = await buildApp({ config: cfg, store, engine: cfg.engine, ...(json ? { logTo: 'stderr' as const } : {}) });
        try {
          membership = await joinCluster(cfg, { warn: (msg) => built.log.warn(msg), info: (msg) => built.log.info(msg) });
        } catch (err) {
          await built.close();
          throw err;
        }
        return built;
      })().catch(async (err: unknown) => {
        await store.close();
        serveLock.release();
        throw err;
      });
      if (applied.length) app.log.info({ applied }, 'applied pending migrations');

      let backups: BackupSchedule | null = null;
      let closing = false;
      const shutdown = async (signal: string) => {
        if (closing) {
          app.log.warn('second signal: exiting without waiting');
          process.exit(1);
        }
        closing = true;
        backups?.stop();
        app.log.info({ signal }, 'shutting down: finishing in-flight requests');
        try {
          await app.close();
        } finally {
          await membership?.release();
          await store.close();
          serveLock.release();
          app.log.info('stopped');
        }
      };
      process.on('SIGTERM', () => void shutdown('SIGTERM'));
      process.on('SIGINT', () => void shutdown('SIGINT'));

      if (app.metrics && config.metricsPort !== null)
        app.log.info({ url: `${await app.metrics.listen(config.metricsPort)}/metrics` }, 'metrics served on the loopback address');
      const address = await app.listen({ host: config.host, port: config.port });
      backups = startBackupSchedule(config, app.log);
      if (json) process.stdout.write(`${JSON.stringify(startLine(address, config, initialised))}\n`);
      else process.stdout.write(`svc listening on ${address} (public URL ${config.publicUrl}, data ${config.dataDir})\n`);
    });
}
