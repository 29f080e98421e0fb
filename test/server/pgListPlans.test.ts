/**
 * PostgreSQL's plans of the lists for a workspace whose rows are older than another's (README,
 * Reads at scale). Told `workspace_id = $1 ... ORDER BY id DESC`, the planner guessed the
 * workspace's rows spread evenly over the ids and walked the primary key backward from the
 * newest, filtering, through every newer row of the others: a million contacts under 800,000
 * newer ones took about 300 ms a page, where the workspace's index takes 0.1
 * (context.ts, newestInWorkspace). Here an old workspace of 20,000 contacts, runs, webhook
 * events, delivery attempts and audit entries lies under a newer one of 30,000. The statements
 * the services build are EXPLAINed as the app runs them (unnamed, so planned with their values
 * each time), and prepared: after six runs, when the plan cache may take its generic plan, and
 * with the generic plan forced. Each reads an index that starts with the workspace (a tag's
 * contacts then by id), never the primary key across the newer rows, and as the app runs it
 * reads no more rows than its page or window; the services answer what a plain scan finds.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { eq } from 'drizzle-orm';
import pg from 'pg';
import { pgSeedActivity, pgSeedContacts, pgSeedCounters } from '../../bench/seed.js';
import { pageQuery, windowEndQuery, type WorkspaceContext } from '../../src/core/context.js';
import { contacts, deliveryAttempts, webhookEvents, workflowRuns } from '../../src/core/db/schema.js';
import { auditPageQuery, listAuditLogs } from '../../src/core/services/auditLog.js';
import { contactListQuery, listContacts, listScanBeyond, SHORT_Q_SCAN_ROWS, type ContactFilter } from '../../src/core/services/contacts.js';
import { listDeliveryAttempts } from '../../src/core/services/deliveries.js';
import { listWorkspaceRuns, runQuery } from '../../src/core/services/runs.js';
import { encodeCursor, LIST_SCAN_ROWS } from '../../src/core/pagination.js';
import { buildAsOwner, type TestServer } from '../helpers.js';
import { createDatabase, skipOutsideCIWithoutPostgres } from '../pg.js';

const OLD_ROWS = 20_000;
const NEWER_ROWS = 30_000;

type Statement = { toSQL(): { sql: string; params: unknown[] } };
const KINDS = ['custom plan', 'prepared, after six runs', 'generic plan'] as const;

/** The statement's plans: as the app runs it, and (`prepared`) prepared (KINDS). */
async function plans(client: pg.Client, statement: Statement, prepared = true): Promise<string[]> {
  const { sql: text, params } = statement.toSQL();
  const shown = (rows: Record<string, unknown>[]) => rows.map((r) => r['QUERY PLAN']).join('\n');
  const custom = shown((await client.query(`EXPLAIN ${text}`, params)).rows);
  if (!prepared) return [custom];
  const args = `(${params.map((p) => (typeof p === 'number' ? String(p) : client.escapeLiteral(String(p)))).join(', ')})`;
  await client.query(`PREPARE listed AS ${text}`);
  try {
    for (let i = 0; i < 6; i++) await client.query(`EXECUTE listed${args}`);
    const cached = shown((await client.query(`EXPLAIN EXECUTE listed${args}`)).rows);
    await client.query('SET plan_cache_mode = force_generic_plan');
    return [custom, cached, shown((await client.query(`EXPLAIN EXECUTE listed${args}`)).rows)];
  } finally {
    await client.query('RESET plan_cache_mode');
    await client.query('DEALLOCATE listed');
  }
}

/**
 * How many rows of `table` the statement reads as the app runs it: each scan of the table's
 * rows, those it kept and those its conditions removed, in every loop (EXPLAIN ANALYZE).
 */
async function rowsRead(client: pg.Client, statement: Statement, table: string): Promise<number> {
  const { sql: text, params } = statement.toSQL();
  const lines = (await client.query(`EXPLAIN (ANALYZE, TIMING OFF, SUMMARY OFF) ${text}`, params)).rows.map((r) => String(r['QUERY PLAN']));
  const scan = new RegExp(`(Seq Scan|Index (Only )?Scan (Backward )?using \\S+|Bitmap Heap Scan) on ${table}\\b.*actual rows=(\\d+) loops=(\\d+)`);
  let read = 0;
  lines.forEach((line, i) => {
    const node = scan.exec(line);
    if (!node) return;
    let rows = Number(node[4]);
    for (const detail of lines.slice(i + 1)) {
      if (detail.includes('->')) break;
      rows += Number(/Rows Removed by (?:Filter|Index Recheck): (\d+)/.exec(detail)?.[1] ?? 0);
    }
    read += rows * Number(node[5]);
  });
  return read;
}

/**
 * Every plan of the statement reads `table` through `index`, never its primary key, a
 * sequential scan or a bitmap of it; as the app runs it, it reads at most `most` of its rows.
 */
async function assertReads(client: pg.Client, statement: Statement, table: string, index: string, most: number, label: string): Promise<void> {
  for (const [i, plan] of (await plans(client, statement)).entries()) {
    assert.match(plan, new RegExp(`Index (Only )?Scan (Backward )?using ${index} on ${table}\\b`), `${label}, ${KINDS[i]}:\n${plan}`);
    assert.doesNotMatch(plan, new RegExp(`using ${table}_pkey|Seq Scan on ${table}\\b|Bitmap Heap Scan on ${table}\\b`), `${label}, ${KINDS[i]}:\n${plan}`);
  }
  const read = await rowsRead(client, statement, table);
  assert.ok(read <= most, `${label}: read ${read} rows of ${table}, more than ${most}`);
}

test('PostgreSQL lists: a workspace older than another reads its own index, not the primary key across the newer rows', {
  skip: skipOutsideCIWithoutPostgres(),
}, async (t) => {
  const database = await createDatabase();
  const { s } = await buildAsOwner(t, { env: { SVC_DATABASE_URL: database.url } });
  t.after(database.drop);
  const client = new pg.Client({ connectionString: s.config.databaseUrl! });
  await client.connect();
  try {
    await oldUnderNewer(t, s, client);
  } finally {
    await client.end();
  }
});

async function oldUnderNewer(t: TestContext, s: TestServer, client: pg.Client): Promise<void> {
  const old = s.workspaceId;
  const workflowOf = async (ws: number) =>
    Number(
      (
        await client.query(
          "INSERT INTO workflows (workspace_id, name, status, trigger_source, steps) VALUES ($1, 'seeded', 'ACTIVE', 'MANUAL', '[]') RETURNING id",
          [ws],
        )
      ).rows[0]!.id,
    );
  const oldWorkflow = await workflowOf(old);
  // The old workspace's rows take the lowest ids, the newer one's all lie above them.
  await client.query('SET session_replication_role = replica');
  await pgSeedContacts(client, old, OLD_ROWS, { prefix: 'old' });
  await pgSeedActivity(client, old, oldWorkflow, OLD_ROWS);
  // Older in time too: the audit log is read by (at, id), and audit_logs_at_idx orders by at alone.
  await client.query(
    `UPDATE audit_logs SET at = to_char((at::timestamptz - interval '30 days') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') WHERE workspace_id = $1`,
    [old],
  );
  const newer = Number((await client.query("INSERT INTO workspaces (name) VALUES ('newer') RETURNING id")).rows[0]!.id);
  await pgSeedContacts(client, newer, NEWER_ROWS, { prefix: 'newer', offset: OLD_ROWS });
  await pgSeedActivity(client, newer, await workflowOf(newer), NEWER_ROWS);
  await pgSeedCounters(client, [old, newer]);
  // Every old run is of one old contact too: the runs of one contact, like those of one workflow, lie under the newer runs.
  const oldContact = Number((await client.query('SELECT min(id) AS id FROM contacts WHERE workspace_id = $1', [old])).rows[0]!.id);
  await client.query('UPDATE workflow_runs SET contact_id = $1 WHERE workspace_id = $2', [oldContact, old]);
  await client.query('SET session_replication_role = DEFAULT');
  // As autovacuum leaves the tables: statistics, and the visibility map that lets a window's
  // end be counted in the workspace's index alone.
  await client.query('VACUUM ANALYZE');

  const ctx: WorkspaceContext = { db: s.db, store: s.store, config: s.config, actor: { type: 'SYSTEM', id: null, label: 'test' }, ip: null, workspaceId: old };
  /** Above the old workspace's newest row of `table`: the first page's bound. */
  const top = async (table: string) => Number((await client.query(`SELECT max(id) AS id FROM ${table} WHERE workspace_id = $1`, [old])).rows[0]!.id) + 1;
  /** The first page's bound and one 5,000 rows below it, as a statement's cursor (`id`) and an API's (none for the first page). */
  const bounds = async (table: string) => {
    const hi = await top(table);
    return [
      { below: hi, id: undefined, cursor: undefined },
      { below: hi - 5_000, id: hi - 5_000, cursor: encodeCursor(hi - 5_000) },
    ];
  };
  /** The old workspace's ids below `below` that meet `where`, newest first, by a plain scan. */
  const scan = async (table: string, below: number, where = 'true', params: unknown[] = []) =>
    (
      await client.query(`SELECT id FROM ${table} WHERE workspace_id = $1 AND id < $2 AND (${where}) ORDER BY id DESC LIMIT 50`, [old, below, ...params])
    ).rows.map((r) => Number(r.id));
  const vip = 'EXISTS (SELECT 1 FROM contact_tags g WHERE g.contact_id = contacts.id AND g.tag_key = $3)';
  const contactIds = async (filter: ContactFilter) => (await listContacts(ctx, filter)).data.map((c) => c.id);

  await t.test('contacts, plain and ?tag=, first page and below a cursor', async () => {
    for (const { below, cursor } of await bounds('contacts')) {
      const plain: ContactFilter = { limit: 50, cursor };
      await assertReads(client, contactListQuery(ctx, plain), 'contacts', 'contacts_workspace_idx', 51, `contacts below ${below}`);
      assert.deepEqual(await contactIds(plain), await scan('contacts', below));

      // The tag's index drives; its contacts are then looked up by id.
      const tagged: ContactFilter = { limit: 50, tag: 'vip', cursor };
      for (const [i, plan] of (await plans(client, contactListQuery(ctx, tagged))).entries()) {
        const label = `tag=vip below ${below}, ${KINDS[i]}:\n${plan}`;
        assert.match(plan, /Index Only Scan Backward using contact_tags_workspace_tag_contact_idx on contact_tags/, label);
        assert.doesNotMatch(plan, /Index Scan Backward using contacts_pkey|contact_tags_contact_id_tag_key_pk|Seq Scan|Bitmap Heap Scan on contacts/, label);
      }
      assert.deepEqual(await contactIds(tagged), await scan('contacts', below, vip, ['vip']));
    }
  });

  await t.test('contacts with a short q, alone and beside a tag: a window of the workspace, never the newer rows above it', async () => {
    for (const { below, id, cursor } of await bounds('contacts')) {
      const windowEnd = windowEndQuery(ctx, contacts, id, 'index', undefined, SHORT_Q_SCAN_ROWS);
      await assertReads(client, windowEnd, 'contacts', 'contacts_workspace_idx', SHORT_Q_SCAN_ROWS + 1, `window end below ${below}`);
      // The page: the window's contacts, each matched (along the workspace's index, or, as the
      // planner may choose below a cursor, the window's id range, which holds no newer row).
      const alone: ContactFilter = { limit: 50, q: '7', cursor };
      const beyond = await listScanBeyond(ctx, alone);
      assert.ok(beyond !== null && beyond < below, `a window below ${below}`);
      // As the app runs it alone: a generic plan does not know the pattern, and may look it up in
      // the trigram index (svc's statements are unnamed, planned with their values each time).
      const page = contactListQuery(ctx, alone, beyond);
      const [plan] = await plans(client, page, false);
      assert.doesNotMatch(plan!, /Index Scan Backward using contacts_pkey|Seq Scan/, `q=7 below ${below}:\n${plan}`);
      assert.ok((await rowsRead(client, page, 'contacts')) <= SHORT_Q_SCAN_ROWS, `q=7 below ${below} reads the window at most`);
      assert.deepEqual(await contactIds(alone), await scan('contacts', below, `search_text LIKE '%7%' AND id > ${beyond}`));

      // Beside a tag: the tag's rows in the window, their contacts looked up by id. Joined to
      // them, the planner had read the window's id range along the primary key, on a first
      // page up through every newer contact.
      const tagged: ContactFilter = { limit: 50, q: '7', tag: 'vip', cursor };
      const window = await listScanBeyond(ctx, tagged);
      assert.ok(window !== null && window < below, `a window below ${below}`);
      const tagPage = contactListQuery(ctx, tagged, window);
      const [tagPlan] = await plans(client, tagPage, false);
      const label = `tag=vip&q=7 below ${below}:\n${tagPlan}`;
      assert.match(tagPlan!, /Index Only Scan Backward using contact_tags_workspace_tag_contact_idx on contact_tags/, label);
      assert.match(tagPlan!, /Index Scan using contacts_pkey on contacts[^\n]*\n\s+Index Cond: \([^\n]*id = ANY \(\$0\)\)/, label);
      assert.doesNotMatch(tagPlan!, /Index Scan Backward using contacts_pkey|Seq Scan|Bitmap Heap Scan on contacts/, label);
      // A tenth of the window's contacts are tagged: those, not the window, and never the newer rows.
      assert.ok((await rowsRead(client, tagPage, 'contacts')) <= SHORT_Q_SCAN_ROWS / 5, `tag=vip&q=7 below ${below} reads the window's tagged contacts`);
      assert.deepEqual(await contactIds(tagged), await scan('contacts', below, `search_text LIKE '%7%' AND id > ${window} AND ${vip}`, ['vip']));
    }
  });

  await t.test('runs and delivery attempts, all and in one status, first page and below a cursor', async () => {
    for (const { below, id, cursor } of await bounds('workflow_runs')) {
      await assertReads(client, pageQuery(ctx, workflowRuns, id, 51, 'index'), 'workflow_runs', 'workflow_runs_workspace_idx', 51, `runs below ${below}`);
      // In one status: the (workspace, status, id) index, also for the window's end (runs.ts, fewInStatus).
      const failed = eq(workflowRuns.status, 'FAILED');
      await assertReads(
        client,
        pageQuery(ctx, workflowRuns, id, 51, 'index', failed),
        'workflow_runs',
        'workflow_runs_workspace_status_idx',
        51,
        `FAILED runs below ${below}`,
      );
      await assertReads(
        client,
        windowEndQuery(ctx, workflowRuns, id, 'index', failed),
        'workflow_runs',
        'workflow_runs_workspace_status_idx',
        LIST_SCAN_ROWS + 1,
        `FAILED window below ${below}`,
      );
      const runIds = async (status?: 'FAILED') => (await listWorkspaceRuns(ctx, { limit: 50, cursor, status })).data.map((r) => r.runId);
      assert.deepEqual(await runIds(), await scan('workflow_runs', below));
      assert.deepEqual(await runIds('FAILED'), await scan('workflow_runs', below, "status = 'FAILED'"));
    }
    for (const { below, id, cursor } of await bounds('delivery_attempts')) {
      const label = `delivery attempts below ${below}`;
      await assertReads(client, pageQuery(ctx, deliveryAttempts, id, 51, 'index'), 'delivery_attempts', 'delivery_attempts_workspace_idx', 51, label);
      for (const plan of await plans(client, pageQuery(ctx, deliveryAttempts, id, 51, 'index', eq(deliveryAttempts.status, 'FAILED')))) {
        assert.doesNotMatch(plan, /using delivery_attempts_pkey|Seq Scan/, `FAILED ${label}:\n${plan}`);
      }
      const attemptIds = async (status?: 'FAILED') => (await listDeliveryAttempts(ctx, { limit: 50, cursor, status })).data.map((r) => r.id);
      assert.deepEqual(await attemptIds(), await scan('delivery_attempts', below));
      assert.deepEqual(await attemptIds('FAILED'), await scan('delivery_attempts', below, "status = 'FAILED'"));
    }
  });

  await t.test('the audit log, newest first by (at, id), first page and below a cursor', async () => {
    const newest = (await client.query('SELECT at, id FROM audit_logs WHERE workspace_id = $1 ORDER BY at DESC, id DESC', [old])).rows.map((r) => ({
      at: String(r.at),
      id: Number(r.id),
    }));
    // A page reads 51 entries, and below a cursor the cursor's own (`at <= ?` bounds the index range).
    for (const [from, key] of [[0, undefined] as const, [5_000, newest[4_999]!] as const]) {
      await assertReads(client, auditPageQuery(ctx, {}, key, 51), 'audit_logs', 'audit_logs_workspace_at_idx', 52, `audit log from ${from}`);
    }
    assert.deepEqual(
      (await listAuditLogs(ctx, { limit: 50 })).data.map((e) => e.id),
      newest.slice(0, 50).map((e) => e.id),
    );
  });

  await t.test('the runs of one workflow or one contact, alone and in one status, read along its index (the workspace checked on each row)', async () => {
    for (const { below, id, cursor } of await bounds('workflow_runs')) {
      for (const [named, index] of [
        [{ workflowId: oldWorkflow }, 'workflow_runs_workflow_idx'],
        [{ contactId: oldContact }, 'workflow_runs_contact_idx'],
      ] as const) {
        const label = `runs of ${JSON.stringify(named)} below ${below}`;
        const alone = runQuery(named, false);
        await assertReads(client, pageQuery(ctx, workflowRuns, id, 51, alone.scope, ...alone.conditions), 'workflow_runs', index, 51, label);
        // With a status beside it (not few in it) the parent drives a window, the status checked
        // on each run: its end is the parent's run LIST_SCAN_ROWS down (at this size the planner
        // may rightly read the table for it; the page itself is asserted through the API below).
        assert.equal(runQuery({ ...named, status: 'FAILED' }, false).driver, 'parent', label);
        const runIds = async (status?: 'FAILED') => (await listWorkspaceRuns(ctx, { ...named, limit: 50, cursor, status })).data.map((r) => r.runId);
        assert.deepEqual(await runIds(), await scan('workflow_runs', below));
        const failedIds = await runIds('FAILED');
        assert.ok(failedIds.length > 0, label);
        assert.deepEqual(failedIds, (await scan('workflow_runs', below, "status = 'FAILED'")).slice(0, failedIds.length));
      }
    }
  });

  await t.test("a workflow's webhook events, read along the workflow's index (the workspace checked on each row)", async () => {
    const statement = pageQuery(ctx, webhookEvents, undefined, 51, { parent: webhookEvents.workflowId, id: oldWorkflow });
    await assertReads(client, statement, 'webhook_events', 'webhook_events_workflow_idx', 51, 'webhook events of the old workflow');
  });
}
