import { createServer, type AddressInfo } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import type { Command } from 'commander';
import { DEFAULT_OWNER_EMAIL, DEFAULT_WORKSPACE_NAME, initialiseDataFolder, needsInitialisation, openStore, type InitResult } from '../core/bootstrap.js';
import { loadConfig, resolveDataDir, type Config, type ConfigFlags } from '../core/config.js';
import { startBackupSchedule, type BackupSchedule } from '../core/services/backupSchedule.js';
import { acquireServeLock } from '../core/serverLock.js';
import { checkStoredSecrets, joinCluster, type NodeMembership } from '../core/cluster.js';
import { describeInit } from './init.js';
import { CliError, cliActor, configFlags, globals } from './io.js';

/** A port the OS gave us, held until `release()`, so that nothing else takes it meanwhile. */
export interface PortReservation {
  readonly port: number;
  release(): Promise<void>;
}

/**
 * Binds a free port on `host` and keeps it bound until released. While it is held, neither
 * another listener nor an outgoing connection (whose local port comes from the same ephemeral
 * range: a database or Redis client) can be given it, so a server started with `--port 0`
 * can name its port in publicUrl, start up for as long as it takes, and release it just
 * before it listens there.
 */
export function reservePort(host: string): Promise<PortReservation> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, host, () => {
      const { port } = probe.address() as AddressInfo;
      // Held, but never what keeps the process alive: a start-up that fails anywhere exits.
      probe.unref();
      let released: Promise<void> | undefined;
      resolve({ port, release: () => (released ??= new Promise((done) => probe.close(() => done()))) });
    });
  });
}

/** A port the OS says is free on this host right now. */
export async function freePort(host: string): Promise<number> {
  const reservation = await reservePort(host);
  await reservation.release();
  return reservation.port;
}

/** A listen failure said in the user's terms: which address, and what to change. */
function listenError(err: unknown, host: string, port: number, setting: string): unknown {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  const where = `${host}:${port}`;
  if (code === 'EADDRINUSE')
    return new CliError(`${where} is already in use (another svc serve?): stop what listens there, or choose another port with ${setting}`);
  if (code === 'EACCES') return new CliError(`not allowed to listen on ${where} (ports below 1024 need privileges): choose another port with ${setting}`);
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return new CliError(`${host} does not resolve to an address: choose another with --host (or SVC_HOST)`);
  if (code === 'EADDRNOTAVAIL') return new CliError(`${host} is not an address of this machine: choose another with --host (or SVC_HOST)`);
  return err;
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
      let reserved: PortReservation | undefined;
      const withPort = async () => {
        const loaded = loadConfig(flags);
        // Pick the port now so that publicUrl (and so webhook URLs) name the real one; it stays
        // bound until just before the server listens on it.
        if (loaded.port === 0) {
          reserved = await reservePort(loaded.host).catch((err: unknown) => {
            throw listenError(err, loaded.host, 0, '--port (or SVC_PORT)');
          });
          flags.port = reserved.port;
        }
        return loadConfig(flags);
      };
      if (await needsInitialisation(flags, process.env)) {
        initialised = await initialiseDataFolder(flags, process.env, { workspaceName: DEFAULT_WORKSPACE_NAME, email: DEFAULT_OWNER_EMAIL }, cliActor());
        config = await withPort();
        if (!json) process.stdout.write(`${describeInit(initialised, { publicUrl: config.publicUrl, dataDirFlag: globals(cmd).dataDir })}\n\n`);
      }
      try {
        config ??= await withPort();
        serveLock.notePublicUrl(config.publicUrl);
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
          await reserved?.release();
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
          await stopAll();
          app.log.info('stopped');
        };
        const stopAll = async () => {
          try {
            await app.close();
          } finally {
            await membership?.release();
            await store.close();
            serveLock.release();
          }
        };
        process.on('SIGTERM', () => void shutdown('SIGTERM'));
        process.on('SIGINT', () => void shutdown('SIGINT'));

        let address: string;
        try {
          if (app.metrics && config.metricsPort !== null) {
            const metricsUrl = await app.metrics.listen(config.metricsPort).catch((err: unknown) => {
              throw listenError(err, '127.0.0.1', cfg.metricsPort!, '--metrics-port (or SVC_METRICS_PORT)');
            });
            app.log.info({ url: `${metricsUrl}/metrics` }, 'metrics served on the loopback address');
          }
          await reserved?.release();
          address = await app.listen({ host: config.host, port: config.port }).catch((err: unknown) => {
            throw listenError(err, cfg.host, cfg.port, '--port (or SVC_PORT)');
          });
        } catch (err) {
          // A port already taken, say. Everything started so far is stopped, so the process exits
          // with the error instead of staying up unreachable, held by its pool, Redis or heartbeat.
          await reserved?.release();
          closing = true;
          await stopAll().catch((closeErr: unknown) => app.log.error({ err: closeErr }, 'stopping after a failed start'));
          throw err;
        }
        backups = startBackupSchedule(config, app.log);
        if (json) process.stdout.write(`${JSON.stringify(startLine(address, config, initialised))}\n`);
        else process.stdout.write(`svc listening on ${address} (public URL ${config.publicUrl}, data ${config.dataDir})\n`);
      } catch (err) {
        // With --json the generated password goes out only in the line printed once serving: a
        // start that fails after making the folder (a port in use) tells it here, or nobody
        // would ever know it (the next start finds the folder made and prints none).
        if (json && initialised?.generatedPassword)
          process.stderr.write(
            `The data folder was initialised before the start failed: its owner is ${initialised.user.email} with the password ${initialised.generatedPassword} (shown only now; change it with svc user passwd).\n`,
          );
        throw err;
      }
    });
}
