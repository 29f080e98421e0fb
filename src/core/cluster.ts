import { desc, isNotNull } from 'drizzle-orm';
import { hostname } from 'node:os';
import pg from 'pg';
import { ConfigError, type Config } from './config.js';
import { channelSettings, workflows } from './db/schema.js';
import type { Db } from './db/connection.js';
import type { Store } from './db/store.js';
import { decryptSecret } from './secrets.js';

/**
 * What a node checks before it serves, on either store: that its keys are the ones the stored
 * data was written with, and, on PostgreSQL, that it may join the nodes already serving the
 * database.
 */

/** The advisory lock every serving node holds: shared with Redis, alone without it. */
export const NODE_LOCK_KEY = 7140003;

/** How many of the newest encrypted values of each kind are tried. */
const SAMPLE = 5;

/**
 * The first stored secret this node's encryption key cannot decrypt (the newest few webhook
 * signing secrets and channel credentials are tried), described for a person; or null when
 * every one decrypts (or none is stored yet).
 */
export async function undecryptableSecret(db: Db, config: Pick<Config, 'secrets'>): Promise<string | null> {
  const secrets = await db
    .select({ id: workflows.id, value: workflows.signingSecret })
    .from(workflows)
    .where(isNotNull(workflows.signingSecret))
    .orderBy(desc(workflows.id))
    .limit(SAMPLE);
  for (const row of secrets) if (!decrypts(config, row.value)) return `the webhook signing secret of workflow ${row.id}`;
  const credentials = await db
    .select({ workspaceId: channelSettings.workspaceId, channel: channelSettings.channel, value: channelSettings.credentials })
    .from(channelSettings)
    .where(isNotNull(channelSettings.credentials))
    .orderBy(desc(channelSettings.updatedAt))
    .limit(SAMPLE);
  for (const row of credentials) if (!decrypts(config, row.value)) return `the ${row.channel} credentials of workspace ${row.workspaceId}`;
  return null;
}

function decrypts(config: Pick<Config, 'secrets'>, value: string | null): boolean {
  if (value === null) return true;
  try {
    decryptSecret(config, value);
    return true;
  } catch {
    return false;
  }
}

/** Refuses (ConfigError) a node whose encryption key cannot decrypt what is stored. */
export async function checkStoredSecrets(store: Store, config: Pick<Config, 'secrets'>): Promise<void> {
  const what = await undecryptableSecret(store.db, config);
  if (what) {
    throw new ConfigError(
      `this node's encryption key cannot decrypt ${what}: it is not the key the data was written with. ` +
        'Every node must have the same secrets.encryptionKey and secrets.jwtSecret (SVC_ENCRYPTION_KEY, SVC_JWT_SECRET, or the same config.json)',
    );
  }
}

/**
 * The node lock's connection names its node (`svc node <host>:<pid>`): PostgreSQL lists the
 * nodes serving a database in pg_stat_activity, and drops one with its connection when the
 * node dies. It is the cluster's heartbeat: `svc doctor` reads it (liveNodes).
 */
export const NODE_PREFIX = 'svc node ';

function nodeName(): string {
  return `${NODE_PREFIX}${hostname()}:${process.pid}`.slice(0, 63);
}

/** The nodes serving the database now (their node lock's connections), oldest first. */
export async function liveNodes(client: Pick<pg.Client, 'query'>): Promise<{ node: string; since: string }[]> {
  const { rows } = await client.query<{ name: string; since: Date }>(
    `SELECT application_name AS name, backend_start AS since FROM pg_stat_activity
      WHERE datname = current_database() AND application_name LIKE $1 ORDER BY backend_start`,
    [`${NODE_PREFIX}%`],
  );
  return rows.map((r) => ({ node: r.name.slice(NODE_PREFIX.length), since: new Date(r.since).toISOString() }));
}

/** A node's place in its cluster, held while it serves. */
export interface NodeMembership {
  release(): Promise<void>;
}

/**
 * On PostgreSQL, takes the node lock on a connection of its own, held until release (or the
 * process's death, when the server drops the connection and with it the lock): shared by
 * nodes with Redis, alone by a node without it. So a second node on a database is refused
 * unless both share a Redis (the limits and signals of a cluster live there), and a node
 * without Redis is refused while any other node serves. When the connection is lost (the
 * server restarted), the lock is taken again every few seconds, and `log` is told of both.
 * On SQLite there is one machine, and nothing to take.
 */
export async function joinCluster(
  config: Pick<Config, 'databaseUrl' | 'redisUrl'>,
  log: { warn(msg: string): void; info(msg: string): void },
  opts: { retryMs?: number } = {},
): Promise<NodeMembership> {
  const url = config.databaseUrl;
  if (!url) return { release: async () => {} };
  const shared = config.redisUrl !== null;
  let client: pg.Client | undefined;
  let released = false;
  let retry: NodeJS.Timeout | undefined;

  const take = async (): Promise<void> => {
    const c = new pg.Client({ connectionString: url, application_name: nodeName() });
    c.on('error', () => undefined); // the query fails, or 'end' follows
    await c.connect();
    try {
      const fn = shared ? 'pg_try_advisory_lock_shared' : 'pg_try_advisory_lock';
      const { rows } = await c.query<{ held: boolean }>(`SELECT ${fn}($1) AS held`, [NODE_LOCK_KEY]);
      if (!rows[0]?.held) throw refusal(shared);
    } catch (err) {
      await c.end().catch(() => undefined);
      throw err;
    }
    client = c;
    c.once('end', () => {
      if (released || client !== c) return;
      client = undefined;
      log.warn('lost the connection holding the node lock; taking it again');
      again();
    });
  };
  const again = () => {
    retry = setTimeout(() => {
      take()
        .then(() => log.info('took the node lock again'))
        .catch((err: Error) => {
          log.warn(`could not take the node lock again (${err.message}); trying again`);
          if (!released) again();
        });
    }, opts.retryMs ?? 5_000);
    retry.unref();
  };

  await take();
  return {
    async release() {
      released = true;
      if (retry) clearTimeout(retry);
      await client?.end().catch(() => undefined);
    },
  };
}

function refusal(shared: boolean): ConfigError {
  return new ConfigError(
    shared
      ? 'a node without Redis is serving this database: several nodes need the same Redis (SVC_REDIS_URL) on every node; stop that node or give it the Redis, then start this one'
      : 'another svc node is serving this database: several nodes must share a Redis (SVC_REDIS_URL on every node) for their limits and signals; set it on all of them, or stop the other node',
  );
}
