import { randomUUID } from 'node:crypto';
import type { Config } from '../core/config.js';
import type { Db } from '../core/db/connection.js';
import type { Channel, StepDefinition, StepState } from '../core/db/schema.js';
import { normalizeEmail, normalizePhone } from '../core/validation.js';
import { nextStep, type ProgramStep } from '../core/program.js';
import { processWriteLock } from '../core/db/writeLock.js';
import { deliverOnce, retryDelayMs } from './deliver.js';
import { httpPolicyFrom, safeRequest } from './http.js';
import { evaluateCondition, renderContent, renderString, type RenderContext } from './render.js';

/**
 * Executes runs, one step at a time, inside a worker thread with its own connection.
 *
 * Steps read freely (WAL readers never wait) and queue their writes; a batch's queued
 * writes are applied together in one short transaction under the process write lock, so
 * the threads render and decide in parallel, hold the lock only to write, and a batch
 * costs one fsync. Before any step talks to the outside (http_request, a provider other
 * than the outbox) everything queued so far, including the run's progress, is committed:
 * no lock is held across the network and a message's SENDING row is durable before it is
 * sent. A crash loses only what was not committed; the run's lease then expires and it is
 * executed again from its last committed state: DB effects happen once, and a message
 * whose send may have happened is never sent again (at most once).
 */

interface RunRow {
  id: number;
  workspace_id: number;
  workflow_id: number;
  contact_id: number | null;
  status: string;
  definition: string;
  step_states: string;
  trigger: string;
  lease_owner: string | null;
}

interface ContactRow {
  id: number;
  email: string | null;
  phone: string | null;
  first_name: string | null;
  last_name: string | null;
  attributes: string;
}

type Outcome =
  | { kind: 'completed' }
  | { kind: 'branch'; value: boolean }
  | { kind: 'failed'; error: string }
  | { kind: 'end' }
  | { kind: 'wait'; until: number; error?: string };

export interface BatchResult {
  completed: number;
  failed: number;
  waiting: number;
  skipped: number;
}

const CHANNEL_OF: Record<string, Channel> = { send_email: 'EMAIL', send_sms: 'SMS', send_whatsapp: 'WHATSAPP' };

function prepare(db: Db) {
  const c = db.$client;
  return {
    run: c.prepare<[number], RunRow>('SELECT id, workspace_id, workflow_id, contact_id, status, definition, step_states, "trigger", lease_owner FROM workflow_runs WHERE id = ?'),
    contact: c.prepare<[number, number], ContactRow>('SELECT id, email, phone, first_name, last_name, attributes FROM contacts WHERE id = ? AND workspace_id = ?'),
    tags: c.prepare<[number], { name: string }>('SELECT name FROM contact_tags WHERE contact_id = ? ORDER BY tag_key'),
    workspace: c.prepare<[number], { id: number; name: string; plan: string }>('SELECT id, name, plan FROM workspaces WHERE id = ?'),
    template: c.prepare<[number, number], { id: number; channel: string; content: string }>('SELECT id, channel, content FROM templates WHERE id = ? AND workspace_id = ?'),
    addTag: c.prepare('INSERT INTO contact_tags (contact_id, workspace_id, tag_key, name) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING'),
    removeTag: c.prepare('DELETE FROM contact_tags WHERE contact_id = ? AND workspace_id = ? AND tag_key = ?'),
    updateContact: c.prepare(
      'UPDATE contacts SET email = @email, phone = @phone, first_name = @firstName, last_name = @lastName, attributes = @attributes, updated_at = @now WHERE id = @id AND workspace_id = @workspaceId',
    ),
    emailTaken: c.prepare<[number, string, number], { id: number }>('SELECT id FROM contacts WHERE workspace_id = ? AND email = ? AND id != ?'),
    phoneTaken: c.prepare<[number, string, number], { id: number }>('SELECT id FROM contacts WHERE workspace_id = ? AND phone = ? AND id != ?'),
    saveRun: c.prepare(
      `UPDATE workflow_runs SET status = @status, step_states = @stepStates, run_at = @runAt, lease_owner = NULL, lease_until = NULL,
         updated_at = @now, finished_at = @finishedAt WHERE id = @id AND lease_owner = @owner`,
    ),
    saveProgress: c.prepare('UPDATE workflow_runs SET step_states = ?, updated_at = ? WHERE id = ? AND lease_owner = ?'),
    provider: c.prepare<[number, string], { provider: string }>('SELECT provider FROM channel_settings WHERE workspace_id = ? AND channel = ?'),
    attemptsForStep: c.prepare<[number, number], { status: string }>('SELECT status FROM delivery_attempts WHERE run_id = ? AND step_index = ? ORDER BY attempt, id'),
    insertOutboxAttempt: c.prepare(
      `INSERT INTO delivery_attempts (workspace_id, channel, provider, "to", status, attempt, provider_message_id, run_id, step_index, template_id, rendered)
       VALUES (@workspaceId, @channel, 'outbox', @to, 'SENT', @attempt, @providerMessageId, @runId, @stepIndex, @templateId, @rendered)`,
    ),
    begin: c.prepare('BEGIN IMMEDIATE'),
    commit: c.prepare('COMMIT'),
    rollback: c.prepare('ROLLBACK'),
  };
}

/** Writes queued by one run, applied together (in a savepoint) when the batch commits. */
interface PendingRun {
  ops: (() => void)[];
  /** Written instead when the run's writes fail to apply (a unique clash, say). */
  onFailure: (err: unknown) => void;
}

/** The run's contact as the run sees it: read once, then kept up to date by its own steps. */
interface LiveContact {
  row: ContactRow;
  attributes: Record<string, unknown>;
  tags: Map<string, string>;
}

export class RunExecutor {
  private readonly sql: ReturnType<typeof prepare>;
  private pending: PendingRun[] = [];
  /** The run being executed, so its progress can be saved before a network call. */
  private current: { id: number; owner: string; states: StepState[]; run: PendingRun } | undefined;

  constructor(
    private readonly db: Db,
    private readonly config: Config,
  ) {
    this.sql = prepare(db);
  }

  /** Applies every queued write in one transaction under the process write lock. */
  private flush(): void {
    const runs = this.pending;
    this.pending = [];
    if (!runs.length) return;
    const client = this.db.$client;
    const lock = processWriteLock();
    lock?.acquire();
    try {
      this.sql.begin.run();
      try {
        for (const run of runs) {
          try {
            client.transaction(() => run.ops.forEach((op) => op()))();
          } catch (err) {
            client.transaction(() => run.onFailure(err))();
          }
        }
        this.sql.commit.run();
      } catch (err) {
        if (client.inTransaction) this.sql.rollback.run();
        throw err;
      }
    } finally {
      lock?.release();
    }
  }

  /**
   * Called before any network call: commits everything queued, with the steps of the
   * current run done so far, so a crash during the call resumes after the done steps.
   */
  private beforeNetwork(): void {
    const current = this.current;
    if (current) {
      const states = JSON.stringify(current.states);
      const ops = current.run.ops;
      this.pending.push({
        ops: [...ops, () => this.sql.saveProgress.run(states, new Date().toISOString(), current.id, current.owner)],
        onFailure: (err) => {
          throw err;
        },
      });
      current.run.ops = [];
    }
    this.flush();
  }

  /** Executes a batch of leased runs; returns how they ended up. */
  async executeBatch(runIds: number[], owner: string): Promise<BatchResult> {
    const result: BatchResult = { completed: 0, failed: 0, waiting: 0, skipped: 0 };
    try {
      for (const id of runIds) {
        const status = await this.executeRun(id, owner);
        if (status === 'COMPLETED') result.completed++;
        else if (status === 'FAILED') result.failed++;
        else if (status === 'WAITING') result.waiting++;
        else result.skipped++;
      }
    } finally {
      this.current = undefined;
      this.flush();
    }
    return result;
  }

  private async executeRun(id: number, owner: string): Promise<string | undefined> {
    const run = this.sql.run.get(id);
    if (!run || run.status !== 'RUNNING' || run.lease_owner !== owner) return undefined;
    const steps = JSON.parse(run.definition) as ProgramStep[];
    const states = JSON.parse(run.step_states) as StepState[];
    const trigger = JSON.parse(run.trigger) as Record<string, unknown>;
    const workspace = this.sql.workspace.get(run.workspace_id) ?? { id: run.workspace_id, name: '', plan: 'STARTER' };
    const runCtx = { id: run.id, workflowId: run.workflow_id };
    const row = run.contact_id === null ? undefined : this.sql.contact.get(run.contact_id, run.workspace_id);
    const contact: LiveContact | undefined = row && {
      row,
      attributes: JSON.parse(row.attributes) as Record<string, unknown>,
      tags: new Map(this.sql.tags.all(row.id).map((t) => [t.name.toLowerCase(), t.name])),
    };
    const pending: PendingRun = { ops: [], onFailure: () => {} };
    this.current = { id, owner, states, run: pending };
    let status: 'COMPLETED' | 'FAILED' | 'WAITING' = 'COMPLETED';
    let runAt = new Date().toISOString();
    let lastIndex = -1;

    // Walk the program from its entry, past the steps already done, following each step's
    // next (a condition's branch); stop at a wait, a failure or the end.
    let index: number | null = steps.length ? 0 : null;
    const visited = new Set<number>();
    while (index !== null && !visited.has(index)) {
      visited.add(index);
      const state: StepState = states[index] ?? { status: 'PENDING', startedAt: null, finishedAt: null };
      if (state.status === 'COMPLETED') {
        index = nextStep(steps, index, state.branch);
        continue;
      }
      if (state.status === 'SKIPPED' || state.status === 'FAILED') break;
      const step = steps[index]!;
      state.startedAt ??= new Date().toISOString();
      lastIndex = index;
      let outcome: Outcome;
      try {
        const ctx: RenderContext = { contact: contact ? contactView(contact) : {}, trigger, workspace, run: runCtx };
        outcome = await this.executeStep(run, index, step, state, ctx, contact, pending);
      } catch (err) {
        outcome = { kind: 'failed', error: (err as Error).message || 'step failed' };
      }
      const finishedAt = new Date().toISOString();
      if (outcome.kind === 'wait') {
        states[index] = { ...state, status: 'WAITING', ...(outcome.error ? { error: outcome.error } : {}) };
        status = 'WAITING';
        runAt = new Date(outcome.until).toISOString();
        break;
      }
      if (outcome.kind === 'failed') {
        states[index] = { ...state, status: 'FAILED', finishedAt, error: outcome.error.slice(0, 2000) };
        status = 'FAILED';
        break;
      }
      const { error: _drop, ...clean } = state;
      void _drop;
      states[index] = { ...clean, status: 'COMPLETED', finishedAt, ...(outcome.kind === 'branch' ? { branch: outcome.value } : {}) };
      if (outcome.kind === 'end') break;
      index = nextStep(steps, index, outcome.kind === 'branch' ? outcome.value : undefined);
    }
    if (status === 'COMPLETED') {
      // Steps the run never reached (a filter ended it, or the other branch) are SKIPPED.
      for (let i = 0; i < steps.length; i++) if (!states[i] || states[i]!.status === 'PENDING') states[i] = { status: 'SKIPPED', startedAt: null, finishedAt: null };
    }
    this.current = undefined;
    for (let i = 0; i < steps.length; i++) states[i] ??= { status: 'PENDING', startedAt: null, finishedAt: null };
    const save = (finalStatus: string, finalStates: StepState[]) => {
      const now = new Date().toISOString();
      this.sql.saveRun.run({ id, owner, status: finalStatus, stepStates: JSON.stringify(finalStates), runAt, now, finishedAt: finalStatus === 'WAITING' ? null : now });
    };
    pending.ops.push(() => save(status, states));
    pending.onFailure = (err) => {
      // The run's writes could not be applied (e.g. another contact took the email meanwhile).
      const failed = states.map((st, i) =>
        i === lastIndex ? { ...st, status: 'FAILED' as const, finishedAt: new Date().toISOString(), error: `could not be saved: ${(err as Error).message}` } : st,
      );
      status = 'FAILED';
      save('FAILED', failed);
    };
    this.pending.push(pending);
    return status;
  }

  private async executeStep(
    run: RunRow,
    index: number,
    step: StepDefinition,
    state: StepState,
    ctx: RenderContext,
    contact: LiveContact | undefined,
    pending: PendingRun,
  ): Promise<Outcome> {
    switch (step.type) {
      case 'wait': {
        // First visit parks the run; the visit after the wake-up time completes the step.
        if (state.status === 'WAITING') return { kind: 'completed' };
        return { kind: 'wait', until: Date.now() + Number(step.seconds) * 1000 };
      }
      case 'filter':
        return (await evaluateCondition(String(step.condition), ctx)) ? { kind: 'completed' } : { kind: 'end' };
      case 'condition':
        return { kind: 'branch', value: await evaluateCondition(String(step.condition), ctx) };
      case 'add_tags':
      case 'remove_tags': {
        if (!contact) return { kind: 'failed', error: 'the run has no contact (it was deleted)' };
        for (const raw of step.tags as string[]) {
          const name = raw.trim();
          const key = name.toLowerCase();
          if (step.type === 'add_tags') {
            if (!contact.tags.has(key)) contact.tags.set(key, name);
            pending.ops.push(() => this.sql.addTag.run(contact.row.id, run.workspace_id, key, name));
          } else {
            contact.tags.delete(key);
            pending.ops.push(() => this.sql.removeTag.run(contact.row.id, run.workspace_id, key));
          }
        }
        return { kind: 'completed' };
      }
      case 'update_contact':
        return this.updateContact(run, step, ctx, contact, pending);
      case 'http_request':
        return this.httpRequest(step, ctx);
      case 'send_email':
      case 'send_sms':
      case 'send_whatsapp':
        return this.send(run, index, step, state, ctx, contact, pending);
      default:
        return { kind: 'failed', error: `unknown step type ${step.type}` };
    }
  }

  private async updateContact(run: RunRow, step: StepDefinition, ctx: RenderContext, contact: LiveContact | undefined, pending: PendingRun): Promise<Outcome> {
    if (!contact) return { kind: 'failed', error: 'the run has no contact (it was deleted)' };
    const c = contact.row;
    const next = { email: c.email, phone: c.phone, first_name: c.first_name, last_name: c.last_name };
    const attributes = { ...contact.attributes };
    for (const [field, template] of Object.entries(step.set as Record<string, string>)) {
      const value = (await renderString(template, ctx)).trim();
      if (field.startsWith('attributes.')) {
        const key = field.slice('attributes.'.length);
        if (value === '') delete attributes[key];
        else attributes[key] = value;
      } else if (field === 'email') {
        const email = value === '' ? null : normalizeEmail(value);
        if (email === undefined) return { kind: 'failed', error: `update_contact: "${value.slice(0, 100)}" is not an email address` };
        next.email = email;
      } else if (field === 'phone') {
        const phone = value === '' ? null : normalizePhone(value, this.config.defaultPhoneRegion);
        if (phone === undefined) return { kind: 'failed', error: `update_contact: "${value.slice(0, 100)}" is not a phone number` };
        next.phone = phone;
      } else if (field === 'firstName') next.first_name = value === '' ? null : value.slice(0, 200);
      else if (field === 'lastName') next.last_name = value === '' ? null : value.slice(0, 200);
    }
    if (!next.email && !next.phone) return { kind: 'failed', error: 'update_contact: a contact needs an email or a phone number' };
    if (next.email && next.email !== c.email && this.sql.emailTaken.get(run.workspace_id, next.email, c.id)) {
      return { kind: 'failed', error: 'update_contact: another contact already has this email' };
    }
    if (next.phone && next.phone !== c.phone && this.sql.phoneTaken.get(run.workspace_id, next.phone, c.id)) {
      return { kind: 'failed', error: 'update_contact: another contact already has this phone' };
    }
    contact.row = { ...c, ...next };
    contact.attributes = attributes;
    const values = {
      email: next.email,
      phone: next.phone,
      firstName: next.first_name,
      lastName: next.last_name,
      attributes: JSON.stringify(attributes),
      now: new Date().toISOString(),
      id: c.id,
      workspaceId: run.workspace_id,
    };
    pending.ops.push(() => this.sql.updateContact.run(values));
    return { kind: 'completed' };
  }

  private async httpRequest(step: StepDefinition, ctx: RenderContext): Promise<Outcome> {
    const url = await renderString(String(step.url), ctx);
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries((step.headers as Record<string, string> | undefined) ?? {})) headers[k] = await renderString(v, ctx);
    let body: string | undefined;
    if (step.body !== undefined) {
      body = typeof step.body === 'string' ? await renderString(step.body, ctx) : JSON.stringify((await renderContent({ body: step.body }, ctx)).body);
      if (typeof step.body !== 'string' && !Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) headers['content-type'] = 'application/json';
    }
    this.beforeNetwork();
    const res = await safeRequest({ method: String(step.method), url, headers, body }, httpPolicyFrom(this.config));
    if (res.status >= 400) return { kind: 'failed', error: `http_request: ${step.method} ${url} answered ${res.status}` };
    return { kind: 'completed' };
  }

  private async send(
    run: RunRow,
    index: number,
    step: StepDefinition,
    state: StepState,
    ctx: RenderContext,
    contact: LiveContact | undefined,
    pending: PendingRun,
  ): Promise<Outcome> {
    const channel = CHANNEL_OF[step.type]!;
    // A message is sent at most once: a SENT attempt completes the step, and a send that
    // may have happened before a crash (still SENDING) is not repeated.
    const previous = this.sql.attemptsForStep.all(run.id, index);
    if (previous.some((a) => a.status === 'SENT')) return { kind: 'completed' };
    if (previous.some((a) => a.status === 'SENDING')) {
      return { kind: 'failed', error: 'the process stopped while this message was being sent; it is not sent again, to avoid a duplicate' };
    }
    const template = this.sql.template.get(Number(step.templateId), run.workspace_id);
    if (!template) return { kind: 'failed', error: `template ${step.templateId} does not exist in this workspace` };
    if (template.channel !== channel) return { kind: 'failed', error: `template ${template.id} is a ${template.channel} template, not ${channel}` };
    const to = step.to !== undefined ? (await renderString(String(step.to), ctx)).trim() : channel === 'EMAIL' ? contact?.row.email : contact?.row.phone;
    if (!to) return { kind: 'failed', error: `no ${channel === 'EMAIL' ? 'email address' : 'phone number'} to send to` };
    const rendered = await renderContent(JSON.parse(template.content) as Record<string, unknown>, ctx);
    const attempt = previous.length + 1;
    state.attempts = attempt;
    const provider = this.sql.provider.get(run.workspace_id, channel)?.provider ?? 'outbox';
    if (provider === 'outbox') {
      // The outbox only records: the attempt is one more queued write of this run.
      const values = {
        workspaceId: run.workspace_id,
        channel,
        to,
        attempt,
        providerMessageId: `outbox-${randomUUID()}`,
        runId: run.id,
        stepIndex: index,
        templateId: template.id,
        rendered: JSON.stringify(rendered),
      };
      pending.ops.push(() => this.sql.insertOutboxAttempt.run(values));
      return { kind: 'completed' };
    }
    this.beforeNetwork();
    const outcome = await deliverOnce(
      { db: this.db, config: this.config },
      { workspaceId: run.workspace_id, channel, to, rendered, runId: run.id, stepIndex: index, templateId: template.id, attempt },
    );
    if (outcome.status === 'SENT') return { kind: 'completed' };
    const error = outcome.error ?? 'delivery failed';
    if (outcome.transient && attempt < this.config.deliveryMaxAttempts) {
      return { kind: 'wait', until: Date.now() + retryDelayMs(this.config, attempt), error: `attempt ${attempt} failed: ${error}` };
    }
    return { kind: 'failed', error };
  }
}

function contactView(c: LiveContact): Record<string, unknown> {
  return {
    id: c.row.id,
    email: c.row.email,
    phone: c.row.phone,
    firstName: c.row.first_name,
    lastName: c.row.last_name,
    attributes: c.attributes,
    tags: [...c.tags.values()],
  };
}
