import type pg from 'pg';
import type { AttemptInsert, AttemptMark, ContactUpdate, EngineSql, RunSave, TagDelta } from './sql.js';
import { attemptInsertValues, pgEngineSql } from './sql.js';

/** How one kind of write is sent for many rows at once: its statement and each row's key. */
interface Kind {
  /** The prepared statement's name. */
  name?: string;
  /** An INSERT, UPDATE or DELETE over unnest($1, $2, ...), one array per column. */
  text: string;
  /** Rows are sent in the order of this column (a fixed order of row locks across batches). */
  sortBy?: number;
  /** What is done with the rows the statement answers (RETURNING). */
  answered?: (rows: { workspace_id: number; tag_key: string; name: string }[]) => void;
}

/**
 * The writes of a careless engine batch on PostgreSQL (see PgGroupCommit), held back and sent
 * at its end as one statement per kind of write instead of one per row: every run of the
 * batch saves in the same UPDATE, every message sent is in the same INSERT. With runs
 * executing by the thousand, a round trip per write was most of what a run cost on
 * PostgreSQL (bench:cluster).
 *
 * The result is the same as writing each run's part in turn: a write to a row that a held
 * write already touches (the same run, contact, tag of a contact or attempt) first sends
 * what is held, so two writes of one row keep their order. A failure of any of these
 * statements fails the batch, which then runs again carefully, each run's part written at
 * once in a savepoint of its own (PgRunCommitter). Reads, which the runs' writes do not make,
 * send what is held first and then read.
 */
export class HeldEngineSql implements EngineSql {
  private readonly kinds: Record<
    'addTag' | 'removeTag' | 'updateContact' | 'saveRun' | 'saveProgress' | 'insertAttempt' | 'markAttempt' | 'recordRequest',
    Kind
  >;
  private readonly rows = new Map<Kind, unknown[][]>();
  private readonly keys = new Set<string>();
  private attemptIds: number[] = [];
  private readonly immediate: EngineSql;

  constructor(
    private readonly client: pg.PoolClient,
    /** How many runs' parts the batch has: attempt ids are taken from their sequence that many at a time. */
    private readonly size: number,
    /** Where tag count changes go (the batch's, counted before its COMMIT). */
    deltas: TagDelta[],
  ) {
    this.immediate = pgEngineSql(client, deltas);
    this.kinds = {
      addTag: {
        text: `INSERT INTO contact_tags (contact_id, workspace_id, tag_key, name)
               SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[])
               ON CONFLICT DO NOTHING RETURNING workspace_id, tag_key, name`,
        answered: (rows) => rows.forEach((r) => deltas.push({ workspaceId: r.workspace_id, key: r.tag_key, name: r.name, delta: 1 })),
      },
      removeTag: {
        text: `DELETE FROM contact_tags t USING unnest($1::bigint[], $2::bigint[], $3::text[]) AS d(c, w, k)
                WHERE t.contact_id = d.c AND t.workspace_id = d.w AND t.tag_key = d.k RETURNING t.workspace_id, t.tag_key, t.name`,
        answered: (rows) => rows.forEach((r) => deltas.push({ workspaceId: r.workspace_id, key: r.tag_key, name: r.name, delta: -1 })),
      },
      updateContact: {
        text: `UPDATE contacts c SET email = d.email, phone = d.phone, first_name = d.fn, last_name = d.ln, attributes = d.attrs::json, updated_at = d.now
                 FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[]) AS d(id, ws, email, phone, fn, ln, attrs, now)
                WHERE c.id = d.id AND c.workspace_id = d.ws`,
        sortBy: 0,
      },
      saveRun: {
        text: `UPDATE workflow_runs r SET status = d.status, step_states = d.states::json, run_at = d.run_at, lease_owner = NULL, lease_until = NULL,
                      updated_at = d.now, finished_at = d.fin
                 FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[]) AS d(id, owner, status, states, run_at, now, fin)
                WHERE r.id = d.id AND r.lease_owner = d.owner`,
        sortBy: 0,
      },
      saveProgress: {
        text: `UPDATE workflow_runs r SET step_states = d.states::json, updated_at = d.now
                 FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) AS d(id, owner, states, now)
                WHERE r.id = d.id AND r.lease_owner = d.owner`,
        sortBy: 0,
      },
      insertAttempt: {
        text: `INSERT INTO delivery_attempts (id, workspace_id, channel, provider, "to", status, attempt, provider_message_id, error, run_id, step_index, template_id, rendered)
               SELECT id, ws, ch, pr, t, st, a, pm, e, r, si, ti, re::json
                 FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int[], $8::text[], $9::text[], $10::bigint[], $11::int[], $12::bigint[], $13::text[])
                   AS d(id, ws, ch, pr, t, st, a, pm, e, r, si, ti, re)`,
      },
      markAttempt: {
        text: `UPDATE delivery_attempts a SET status = d.st, provider_message_id = d.pm, error = d.e, updated_at = d.now
                 FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[]) AS d(id, st, pm, e, now)
                WHERE a.id = d.id`,
        sortBy: 0,
      },
      recordRequest: {
        text: `INSERT INTO sandbox_requests (workspace_id, run_id, step_index, method, url, headers, body)
               SELECT ws, r, si, m, u, h::json, b FROM unnest($1::bigint[], $2::bigint[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[]) AS d(ws, r, si, m, u, h, b)`,
      },
    };
    for (const [name, kind] of Object.entries(this.kinds)) kind.name = `svc_held_${name}`;
  }

  /** Holds a row of a kind; sends what is held first when that already touches the row's key. */
  private async hold(kind: Kind, key: string | null, row: unknown[]): Promise<void> {
    if (key !== null) {
      if (this.keys.has(key)) await this.flush();
      this.keys.add(key);
    }
    const rows = this.rows.get(kind);
    if (rows) rows.push(row);
    else this.rows.set(kind, [row]);
  }

  /** Sends what is held, one statement per kind. */
  async flush(): Promise<void> {
    const held = [...this.rows];
    this.rows.clear();
    this.keys.clear();
    for (const [kind, rows] of held) {
      if (kind.sortBy !== undefined) {
        const at = kind.sortBy;
        rows.sort((a, b) => (a[at] as number) - (b[at] as number));
      }
      const columns = rows[0]!.map((_, i) => rows.map((row) => row[i]));
      const result = await this.client.query({ name: kind.name, text: kind.text, values: columns });
      kind.answered?.(result.rows);
    }
  }

  private async readAfterFlush<T>(read: () => T): Promise<Awaited<T>> {
    await this.flush();
    return await read();
  }

  run = (id: number) => this.readAfterFlush(() => this.immediate.run(id));
  contact = (id: number, workspaceId: number) => this.readAfterFlush(() => this.immediate.contact(id, workspaceId));
  tags = (contactId: number) => this.readAfterFlush(() => this.immediate.tags(contactId));
  workspace = (id: number) => this.readAfterFlush(() => this.immediate.workspace(id));
  template = (id: number, workspaceId: number) => this.readAfterFlush(() => this.immediate.template(id, workspaceId));
  emailTaken = (workspaceId: number, email: string, exceptId: number) => this.readAfterFlush(() => this.immediate.emailTaken(workspaceId, email, exceptId));
  phoneTaken = (workspaceId: number, phone: string, exceptId: number) => this.readAfterFlush(() => this.immediate.phoneTaken(workspaceId, phone, exceptId));
  attemptsForStep = (runId: number, stepIndex: number) => this.readAfterFlush(() => this.immediate.attemptsForStep(runId, stepIndex));
  provider = (workspaceId: number, channel: string) => this.readAfterFlush(() => this.immediate.provider(workspaceId, channel));
  leaseHeld = (id: number, token: string) => this.readAfterFlush(() => this.immediate.leaseHeld(id, token));

  addTag = (contactId: number, workspaceId: number, key: string, name: string) =>
    this.hold(this.kinds.addTag, `t:${contactId}:${key}`, [contactId, workspaceId, key, name]);
  removeTag = (contactId: number, workspaceId: number, key: string) => this.hold(this.kinds.removeTag, `t:${contactId}:${key}`, [contactId, workspaceId, key]);
  updateContact = (v: ContactUpdate) =>
    this.hold(this.kinds.updateContact, `c:${v.id}`, [v.id, v.workspaceId, v.email, v.phone, v.firstName, v.lastName, v.attributes, v.now]);
  saveRun = (v: RunSave) => this.hold(this.kinds.saveRun, `r:${v.id}`, [v.id, v.owner, v.status, v.stepStates, v.runAt, v.now, v.finishedAt]);
  saveProgress = (stepStates: string, now: string, id: number, owner: string) => this.hold(this.kinds.saveProgress, `r:${id}`, [id, owner, stepStates, now]);
  markAttempt = (v: AttemptMark) => this.hold(this.kinds.markAttempt, `a:${v.id}`, [v.id, v.status, v.providerMessageId, v.error, v.now]);
  recordRequest = (workspaceId: number, runId: number, stepIndex: number, method: string, url: string, headers: string, body: string | null) =>
    this.hold(this.kinds.recordRequest, null, [workspaceId, runId, stepIndex, method, url, headers, body]);

  async insertAttempt(v: AttemptInsert): Promise<number> {
    if (!this.attemptIds.length) {
      const { rows } = await this.client.query<{ id: number }>({
        name: 'svc_engine_attempt_ids',
        text: "SELECT nextval('delivery_attempts_id_seq') AS id FROM generate_series(1, $1)",
        values: [Math.max(this.size, 8)],
      });
      this.attemptIds = rows.map((r) => r.id);
    }
    const id = this.attemptIds.shift()!;
    await this.hold(this.kinds.insertAttempt, `a:${id}`, [id, ...attemptInsertValues(v)]);
    return id;
  }
}
