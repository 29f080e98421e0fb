import type { Config } from '../core/config.js';
import type { Db } from '../core/db/connection.js';
import type { Channel, StepDefinition, StepState } from '../core/db/schema.js';
import { normalizeEmail, normalizePhone } from '../core/validation.js';
import { deliverOnce, retryDelayMs } from './deliver.js';
import { findAttemptsForStep } from '../core/services/deliveries.js';
import { httpPolicyFrom, safeRequest } from './http.js';
import { evaluateCondition, renderContent, renderString, type RenderContext } from './render.js';

/**
 * Executes runs, one step at a time, inside a worker thread with its own connection.
 *
 * Database effects of a batch of runs share one transaction (opened at the first write,
 * committed at the end), so a batch costs one fsync. The transaction is committed before
 * any step that talks to the outside (http_request, a provider other than the outbox),
 * so no lock is held across the network and a message's SENDING row is durable before
 * it is sent. A crash rolls back what was not committed; the run's lease then expires and
 * it is executed again from its last committed state: DB effects happen once, and a
 * message whose send may have happened is never sent again (at most once).
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
    begin: c.prepare('BEGIN IMMEDIATE'),
    commit: c.prepare('COMMIT'),
    rollback: c.prepare('ROLLBACK'),
  };
}

export class RunExecutor {
  private readonly sql: ReturnType<typeof prepare>;

  constructor(
    private readonly db: Db,
    private readonly config: Config,
  ) {
    this.sql = prepare(db);
  }

  private write(): void {
    if (!this.db.$client.inTransaction) this.sql.begin.run();
  }

  private commit(): void {
    if (this.db.$client.inTransaction) this.sql.commit.run();
  }

  /** The run being executed, so its progress can be saved before a network call. */
  private current: { id: number; owner: string; states: StepState[] } | undefined;

  /**
   * Called before any network call: saves the steps done so far and commits, so that no
   * lock is held while waiting and a crash during the call resumes after the done steps.
   */
  private beforeNetwork(): void {
    if (this.current) {
      this.write();
      this.sql.saveProgress.run(JSON.stringify(this.current.states), new Date().toISOString(), this.current.id, this.current.owner);
    }
    this.commit();
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
      this.commit();
    } catch (err) {
      if (this.db.$client.inTransaction) this.sql.rollback.run();
      throw err;
    }
    return result;
  }

  private async executeRun(id: number, owner: string): Promise<string | undefined> {
    const run = this.sql.run.get(id);
    if (!run || run.status !== 'RUNNING' || run.lease_owner !== owner) return undefined;
    const steps = JSON.parse(run.definition) as StepDefinition[];
    const states = JSON.parse(run.step_states) as StepState[];
    const trigger = JSON.parse(run.trigger) as Record<string, unknown>;
    const workspace = this.sql.workspace.get(run.workspace_id) ?? { id: run.workspace_id, name: '', plan: 'STARTER' };
    const runCtx = { id: run.id, workflowId: run.workflow_id };
    let status: 'COMPLETED' | 'FAILED' | 'WAITING' = 'COMPLETED';
    let runAt = new Date().toISOString();
    this.current = { id, owner, states };

    for (let index = 0; index < steps.length; index++) {
      const state: StepState = states[index] ?? { status: 'PENDING', startedAt: null, finishedAt: null };
      if (state.status === 'COMPLETED' || state.status === 'SKIPPED' || state.status === 'FAILED') continue;
      const step = steps[index]!;
      const now = new Date().toISOString();
      state.startedAt ??= now;
      let outcome: Outcome;
      try {
        const contact = run.contact_id === null ? undefined : this.sql.contact.get(run.contact_id, run.workspace_id);
        const ctx: RenderContext = { contact: contact ? this.contactView(contact) : {}, trigger, workspace, run: runCtx };
        outcome = await this.executeStep(run, index, step, state, ctx, contact);
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
      states[index] = { ...clean, status: 'COMPLETED', finishedAt };
      if (outcome.kind === 'end') {
        for (let rest = index + 1; rest < steps.length; rest++) states[rest] = { status: 'SKIPPED', startedAt: null, finishedAt: null };
        break;
      }
    }
    this.current = undefined;
    for (let i = 0; i < steps.length; i++) states[i] ??= { status: 'PENDING', startedAt: null, finishedAt: null };
    this.write();
    const now = new Date().toISOString();
    this.sql.saveRun.run({
      id,
      owner,
      status,
      stepStates: JSON.stringify(states),
      runAt,
      now,
      finishedAt: status === 'WAITING' ? null : now,
    });
    return status;
  }

  private contactView(c: ContactRow): Record<string, unknown> {
    return {
      id: c.id,
      email: c.email,
      phone: c.phone,
      firstName: c.first_name,
      lastName: c.last_name,
      attributes: JSON.parse(c.attributes) as Record<string, unknown>,
      tags: this.sql.tags.all(c.id).map((t) => t.name),
    };
  }

  private async executeStep(run: RunRow, index: number, step: StepDefinition, state: StepState, ctx: RenderContext, contact: ContactRow | undefined): Promise<Outcome> {
    switch (step.type) {
      case 'wait': {
        // First visit parks the run; the visit after the wake-up time completes the step.
        if (state.status === 'WAITING') return { kind: 'completed' };
        return { kind: 'wait', until: Date.now() + Number(step.seconds) * 1000 };
      }
      case 'filter':
        return (await evaluateCondition(String(step.condition), ctx)) ? { kind: 'completed' } : { kind: 'end' };
      case 'add_tags':
      case 'remove_tags': {
        if (!contact) return { kind: 'failed', error: 'the run has no contact (it was deleted)' };
        this.write();
        for (const raw of step.tags as string[]) {
          const name = raw.trim();
          if (step.type === 'add_tags') this.sql.addTag.run(contact.id, run.workspace_id, name.toLowerCase(), name);
          else this.sql.removeTag.run(contact.id, run.workspace_id, name.toLowerCase());
        }
        return { kind: 'completed' };
      }
      case 'update_contact':
        return this.updateContact(run, step, ctx, contact);
      case 'http_request':
        return this.httpRequest(step, ctx);
      case 'send_email':
      case 'send_sms':
      case 'send_whatsapp':
        return this.send(run, index, step, state, ctx, contact);
      default:
        return { kind: 'failed', error: `unknown step type ${step.type}` };
    }
  }

  private async updateContact(run: RunRow, step: StepDefinition, ctx: RenderContext, contact: ContactRow | undefined): Promise<Outcome> {
    if (!contact) return { kind: 'failed', error: 'the run has no contact (it was deleted)' };
    const next = { email: contact.email, phone: contact.phone, firstName: contact.first_name, lastName: contact.last_name };
    const attributes = JSON.parse(contact.attributes) as Record<string, unknown>;
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
      } else if (field === 'firstName' || field === 'lastName') {
        next[field] = value === '' ? null : value.slice(0, 200);
      }
    }
    if (!next.email && !next.phone) return { kind: 'failed', error: 'update_contact: a contact needs an email or a phone number' };
    this.write();
    if (next.email && next.email !== contact.email && this.sql.emailTaken.get(run.workspace_id, next.email, contact.id)) {
      return { kind: 'failed', error: 'update_contact: another contact already has this email' };
    }
    if (next.phone && next.phone !== contact.phone && this.sql.phoneTaken.get(run.workspace_id, next.phone, contact.id)) {
      return { kind: 'failed', error: 'update_contact: another contact already has this phone' };
    }
    this.sql.updateContact.run({ ...next, attributes: JSON.stringify(attributes), now: new Date().toISOString(), id: contact.id, workspaceId: run.workspace_id });
    return { kind: 'completed' };
  }

  private async httpRequest(step: StepDefinition, ctx: RenderContext): Promise<Outcome> {
    const url = await renderString(String(step.url), ctx);
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries((step.headers as Record<string, string> | undefined) ?? {})) headers[k] = await renderString(v, ctx);
    let body: string | undefined;
    if (step.body !== undefined) {
      const rendered = typeof step.body === 'string' ? await renderString(step.body, ctx) : await renderContent({ body: step.body }, ctx).then((r) => JSON.stringify(r.body));
      body = rendered;
      if (typeof step.body !== 'string' && !Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) headers['content-type'] = 'application/json';
    }
    this.beforeNetwork();
    const res = await safeRequest({ method: String(step.method), url, headers, body }, httpPolicyFrom(this.config));
    if (res.status >= 400) return { kind: 'failed', error: `http_request: ${step.method} ${url} answered ${res.status}` };
    return { kind: 'completed' };
  }

  private async send(run: RunRow, index: number, step: StepDefinition, state: StepState, ctx: RenderContext, contact: ContactRow | undefined): Promise<Outcome> {
    const channel = CHANNEL_OF[step.type]!;
    // A message is sent at most once: a SENT attempt completes the step, and a send that
    // may have happened before a crash (still SENDING) is not repeated.
    const previous = findAttemptsForStep(this.db, run.id, index);
    if (previous.some((a) => a.status === 'SENT')) return { kind: 'completed' };
    if (previous.some((a) => a.status === 'SENDING')) {
      return { kind: 'failed', error: 'the process stopped while this message was being sent; it is not sent again, to avoid a duplicate' };
    }
    const template = this.sql.template.get(Number(step.templateId), run.workspace_id);
    if (!template) return { kind: 'failed', error: `template ${step.templateId} does not exist in this workspace` };
    if (template.channel !== channel) return { kind: 'failed', error: `template ${template.id} is a ${template.channel} template, not ${channel}` };
    const to = step.to !== undefined ? (await renderString(String(step.to), ctx)).trim() : channel === 'EMAIL' ? contact?.email : contact?.phone;
    if (!to) return { kind: 'failed', error: `no ${channel === 'EMAIL' ? 'email address' : 'phone number'} to send to` };
    const rendered = await renderContent(JSON.parse(template.content) as Record<string, unknown>, ctx);
    const attempt = previous.length + 1;
    const outcome = await deliverOnce(
      { db: this.db, config: this.config, beforeNetwork: () => this.beforeNetwork() },
      { workspaceId: run.workspace_id, channel, to, rendered, runId: run.id, stepIndex: index, templateId: template.id, attempt },
    );
    state.attempts = attempt;
    if (outcome.status === 'SENT') return { kind: 'completed' };
    const error = outcome.error ?? 'delivery failed';
    if (outcome.transient && attempt < this.config.deliveryMaxAttempts) {
      return { kind: 'wait', until: Date.now() + retryDelayMs(this.config, attempt), error: `attempt ${attempt} failed: ${error}` };
    }
    return { kind: 'failed', error };
  }
}
