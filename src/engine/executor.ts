import { randomUUID } from 'node:crypto';
import { isoNow } from '../core/clock.js';
import type { Config } from '../core/config.js';
import type { Db } from '../core/db/connection.js';
import type { Channel, StepDefinition, StepState } from '../core/db/schema.js';
import { ChannelUnusableError, resolveChannel, type ResolvedChannel } from '../core/services/channels.js';
import { STOPPED_WHILE_SENDING } from '../core/services/deliveries.js';
import { ATTRIBUTES_MAX_BYTES, MAX_TAGS_PER_CONTACT, normalizeEmail, normalizePhone, TOO_MANY_TAGS } from '../core/validation.js';
import { nextStep, type ProgramStep } from '../core/program.js';
import { maskUrlPath } from '../core/steps.js';
import type { LeasedRun, RunCommits } from './committer.js';
import type { AttemptMark, ContactRow, EngineOp, EngineSql, RunRow } from './sql.js';
import { then } from '../core/db/statements.js';
import { countDelivery } from './counters.js';
import { retryDelayMs } from './deliver.js';
import { HttpRequestError, httpPolicyFrom, safeRequest, type HttpPolicy } from './http.js';
import { outboundPolicyFrom, type OutboundPolicy } from './outbound.js';
import { providerFor, type SendResult } from './providers/index.js';
import { evaluateCondition, renderContent, renderString, RUN_RENDER_BUDGET_MS, type RenderBudget, type RenderContext } from './render.js';

/**
 * Executes runs inside a worker thread with its own connection, many at once: each run is
 * its own async execution with its own state, so a run waiting on the network (an SMTP
 * relay, an SMS API, an http_request) does not hold up the others.
 *
 * Steps read freely (WAL readers never wait) and queue their writes; a run commits them at
 * its resting point and before any step talks to the outside, through the thread's group
 * commit (RunCommitter: one fsync for every run committing in the same turn), and only
 * while its lease token holds. Before an outside call (http_request, a provider other than
 * the outbox) the run's progress is durable, a message's SENDING row too, and no lock is
 * held across the network. A crash loses only what was not committed; the run's lease then
 * expires and it is executed again from its last committed state: DB effects happen once,
 * and a message whose send may have happened is never sent again (at most once).
 */

/** A run is deferred by rate-limit answers at most this often before they count as tries. */
const MAX_DEFERRALS = 50;

type Outcome =
  | { kind: 'completed' }
  | { kind: 'branch'; value: boolean }
  | { kind: 'failed'; error: string }
  | { kind: 'end' }
  | { kind: 'wait'; until: number; error?: string };

const CHANNEL_OF: Record<string, Channel> = { send_email: 'EMAIL', send_sms: 'SMS', send_whatsapp: 'WHATSAPP' };

/** The run's contact as the run sees it: read once, then kept up to date by its own steps. */
interface LiveContact {
  row: ContactRow;
  attributes: Record<string, unknown>;
  tags: Map<string, string>;
}

/** One run being executed: its claim, its step states and the writes it has queued. */
interface Execution {
  lease: LeasedRun;
  row: RunRow;
  states: StepState[];
  /** Writes not yet committed; they go with the run's next commit. */
  ops: EngineOp[];
}

/** The run's lease was lost, or the engine is shutting down: stop without writing or calling out. */
class RunStopped extends Error {
  constructor(readonly outcome: 'LOST' | 'RELEASED') {
    super(outcome === 'LOST' ? "the run's lease was lost" : 'the engine is stopping');
  }
}

/** The channel's settings changed while the message waited for its turn: it is sent afresh. */
class ChannelChanged extends Error {}

/** How often one step's message starts again on changed settings before it goes with what it has. */
const MAX_CHANNEL_CHANGES = 3;

/** Whether two resolutions of a channel differ (provider, settings or credentials). */
function sameChannel(a: ResolvedChannel, b: ResolvedChannel): boolean {
  return a.provider === b.provider && JSON.stringify([a.settings, a.credentials]) === JSON.stringify([b.settings, b.credentials]);
}

export type RunOutcome = 'COMPLETED' | 'FAILED' | 'WAITING' | 'SKIPPED' | 'LOST' | 'RELEASED' | 'ERROR';

export interface ExecutorDeps {
  /** For the services the executor calls (channel resolution): the thread's store handle. */
  db: Db;
  /** The reads: on the thread's connection (SQLite) or its pool (PostgreSQL). */
  sql: EngineSql;
  committer: RunCommits;
}

export class RunExecutor {
  private readonly db: Db;
  private readonly sql: EngineSql;
  private readonly committer: RunCommits;
  private readonly outbound: OutboundPolicy;
  private readonly httpPolicy: HttpPolicy;
  private stopping = false;

  constructor(
    deps: ExecutorDeps,
    private readonly config: Config,
  ) {
    this.db = deps.db;
    this.sql = deps.sql;
    this.committer = deps.committer;
    this.outbound = outboundPolicyFrom(config);
    this.httpPolicy = httpPolicyFrom(config);
  }

  /**
   * Shutdown: from now on no run makes another outside call; each stops at its next one
   * (its lease is then released by the scheduler and another process resumes it from its
   * last commit). Writes already under way still commit.
   */
  stop(): void {
    this.stopping = true;
  }

  /**
   * Commits what the run queued, with its steps done so far, before it talks to the outside
   * world: a crash during the call resumes after the done steps, no lock is held across the
   * network, and a run whose lease was lost (or that is being released) never calls out.
   */
  private async beforeNetwork(exec: Execution, extra: EngineOp[] = []): Promise<void> {
    if (this.stopping) throw new RunStopped('RELEASED');
    const states = JSON.stringify(exec.states);
    const now = isoNow();
    const ops: EngineOp[] = [...exec.ops, ...extra, (s) => s.saveProgress(states, now, exec.lease.id, exec.lease.token)];
    exec.ops = [];
    if (!(await this.committer.commit(exec.lease, ops))) throw new RunStopped('LOST');
    if (this.stopping) throw new RunStopped('RELEASED');
  }

  /** Executes one leased run to its next resting point (done, failed, waiting). */
  async execute(lease: LeasedRun): Promise<RunOutcome> {
    const run = await this.sql.run(lease.id);
    if (run?.status !== 'RUNNING' || run.lease_owner !== lease.token) return 'SKIPPED';
    const steps = JSON.parse(run.definition) as ProgramStep[];
    const exec: Execution = { lease, row: run, states: JSON.parse(run.step_states) as StepState[], ops: [] };
    const states = exec.states;
    const trigger = JSON.parse(run.trigger) as Record<string, unknown>;
    const workspace = (await this.sql.workspace(run.workspace_id)) ?? { id: run.workspace_id, name: '', plan: 'STARTER' };
    const runCtx = { id: run.id, workflowId: run.workflow_id };
    const row = run.contact_id === null ? undefined : await this.sql.contact(run.contact_id, run.workspace_id);
    const contact: LiveContact | undefined = row && {
      row,
      attributes: JSON.parse(row.attributes) as Record<string, unknown>,
      tags: new Map((await this.sql.tags(row.id)).map((t) => [t.name.toLowerCase(), t.name])),
    };
    let status: 'COMPLETED' | 'FAILED' | 'WAITING' = 'COMPLETED';
    let runAt = isoNow();
    let lastIndex = -1;

    // Every template this execution renders shares one budget (a hostile workflow of many
    // slow fields must not hold the thread for a render limit per string).
    const budget: RenderBudget = { remainingMs: RUN_RENDER_BUDGET_MS };
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
      state.startedAt ??= isoNow();
      lastIndex = index;
      let outcome: Outcome;
      try {
        const ctx: RenderContext = { contact: contact ? contactView(contact) : {}, trigger, workspace, run: runCtx, budget };
        outcome = await this.executeStep(exec, index, step, state, ctx, contact);
      } catch (err) {
        if (err instanceof RunStopped) return err.outcome;
        outcome = { kind: 'failed', error: (err as Error).message || 'step failed' };
      }
      const finishedAt = isoNow();
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
      for (let i = 0; i < steps.length; i++)
        if (!states[i] || states[i]!.status === 'PENDING') states[i] = { status: 'SKIPPED', startedAt: null, finishedAt: null };
    }
    for (let i = 0; i < steps.length; i++) states[i] ??= { status: 'PENDING', startedAt: null, finishedAt: null };
    const save = (sql: EngineSql, finalStatus: string, finalStates: StepState[]) => {
      const now = isoNow();
      return sql.saveRun({
        id: lease.id,
        owner: lease.token,
        status: finalStatus,
        stepStates: JSON.stringify(finalStates),
        runAt,
        now,
        finishedAt: finalStatus === 'WAITING' ? null : now,
      });
    };
    const held = await this.committer.commit(lease, [...exec.ops, (s) => save(s, status, states)], (err) => {
      // The run's writes could not be applied (e.g. another contact took the email meanwhile).
      const failed = states.map((st, i) =>
        i === lastIndex ? { ...st, status: 'FAILED' as const, finishedAt: isoNow(), error: `could not be saved: ${(err as Error).message}` } : st,
      );
      status = 'FAILED';
      return (s) => save(s, 'FAILED', failed);
    });
    return held ? status : 'LOST';
  }

  private async executeStep(
    exec: Execution,
    index: number,
    step: StepDefinition,
    state: StepState,
    ctx: RenderContext,
    contact: LiveContact | undefined,
  ): Promise<Outcome> {
    const run = exec.row;
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
        if (step.type === 'add_tags') {
          const adding = new Set((step.tags as string[]).map((t) => t.trim().toLowerCase()).filter((k) => !contact.tags.has(k)));
          if (contact.tags.size + adding.size > MAX_TAGS_PER_CONTACT) return { kind: 'failed', error: TOO_MANY_TAGS };
        }
        for (const raw of step.tags as string[]) {
          const name = raw.trim();
          const key = name.toLowerCase();
          if (step.type === 'add_tags') {
            if (!contact.tags.has(key)) contact.tags.set(key, name);
            exec.ops.push((s) => s.addTag(contact.row.id, run.workspace_id, key, name));
          } else {
            contact.tags.delete(key);
            exec.ops.push((s) => s.removeTag(contact.row.id, run.workspace_id, key));
          }
        }
        return { kind: 'completed' };
      }
      case 'update_contact':
        return this.updateContact(exec, step, ctx, contact);
      case 'http_request':
        return this.httpRequest(exec, index, step, state, ctx);
      case 'send_email':
      case 'send_sms':
      case 'send_whatsapp':
        return this.send(exec, index, step, state, ctx, contact);
      default:
        return { kind: 'failed', error: `unknown step type ${step.type}` };
    }
  }

  private async updateContact(exec: Execution, step: StepDefinition, ctx: RenderContext, contact: LiveContact | undefined): Promise<Outcome> {
    if (!contact) return { kind: 'failed', error: 'the run has no contact (it was deleted)' };
    const workspaceId = exec.row.workspace_id;
    const c = contact.row;
    const next = { email: c.email, phone: c.phone, first_name: c.first_name, last_name: c.last_name };
    const attributes = { ...contact.attributes };
    for (const [field, template] of Object.entries(step.set as Record<string, string>)) {
      const value = (await renderString(template, ctx)).trim();
      // As the API refuses it (PostgreSQL text cannot hold it): the step fails, on every store.
      if (value.includes('\u0000')) return { kind: 'failed', error: `update_contact: the value for ${field} contains U+0000, which a contact cannot hold` };
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
    // As the API and imports hold them: a webhook's sender must not grow a contact past it.
    const attributesJson = JSON.stringify(attributes);
    if (Buffer.byteLength(attributesJson) > ATTRIBUTES_MAX_BYTES)
      return { kind: 'failed', error: `update_contact: the attributes would be more than ${ATTRIBUTES_MAX_BYTES} bytes of JSON` };
    if (next.email && next.email !== c.email && (await this.sql.emailTaken(workspaceId, next.email, c.id))) {
      return { kind: 'failed', error: 'update_contact: another contact already has this email' };
    }
    if (next.phone && next.phone !== c.phone && (await this.sql.phoneTaken(workspaceId, next.phone, c.id))) {
      return { kind: 'failed', error: 'update_contact: another contact already has this phone' };
    }
    contact.row = { ...c, ...next };
    contact.attributes = attributes;
    const values = {
      email: next.email,
      phone: next.phone,
      firstName: next.first_name,
      lastName: next.last_name,
      attributes: attributesJson,
      now: isoNow(),
      id: c.id,
      workspaceId,
    };
    exec.ops.push((s) => s.updateContact(values));
    return { kind: 'completed' };
  }

  private async httpRequest(exec: Execution, index: number, step: StepDefinition, state: StepState, ctx: RenderContext): Promise<Outcome> {
    const url = await renderString(String(step.url), ctx);
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries((step.headers as Record<string, string> | undefined) ?? {})) headers[k] = await renderString(v, ctx);
    let body: string | undefined;
    if (step.body !== undefined) {
      body = typeof step.body === 'string' ? await renderString(step.body, ctx) : JSON.stringify((await renderContent({ body: step.body }, ctx)).body);
      if (typeof step.body !== 'string' && !Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) headers['content-type'] = 'application/json';
    }
    if (exec.row.sandbox) {
      // A sandbox run records what it would have sent (GET /sandbox/requests) and goes on as
      // if it had been answered 200: no connection is opened, not even a DNS lookup.
      const run = exec.row;
      exec.ops.push((s) => s.recordRequest(run.workspace_id, run.id, index, String(step.method), url, JSON.stringify(headers), body ?? null));
      return { kind: 'completed' };
    }
    await this.beforeNetwork(exec);
    // "Slow down" (429, or 503 with Retry-After) parks the run until the time named.
    const defer = (retryAfterMs: number, why: string): Outcome => {
      const deferrals = state.deferrals ?? 0;
      if (deferrals >= MAX_DEFERRALS) return { kind: 'failed', error: `http_request: ${why}, ${MAX_DEFERRALS} times` };
      state.deferrals = deferrals + 1;
      return { kind: 'wait', until: Date.now() + retryAfterMs, error: `http_request: ${why}; trying again later` };
    };
    let res: Awaited<ReturnType<typeof safeRequest>>;
    try {
      res = await safeRequest({ method: String(step.method), url, headers, body }, this.httpPolicy);
    } catch (err) {
      if (err instanceof HttpRequestError && err.code === 'rate_limited' && err.retryAfterMs !== undefined) return defer(err.retryAfterMs, err.message);
      throw err;
    }
    // The run's record (every role reads it) names the URL past its host masked: its path or
    // query may be the credential (a Slack webhook's path), as the step's own view masks it.
    const shown = maskUrlPath(url);
    if (res.retryAfterMs !== undefined) return defer(res.retryAfterMs, `${step.method} ${shown} answered ${res.status}`);
    if (res.status >= 400) return { kind: 'failed', error: `http_request: ${step.method} ${shown} answered ${res.status}` };
    return { kind: 'completed' };
  }

  private async send(
    exec: Execution,
    index: number,
    step: StepDefinition,
    state: StepState,
    ctx: RenderContext,
    contact: LiveContact | undefined,
    changes = 0,
  ): Promise<Outcome> {
    const run = exec.row;
    const channel = CHANNEL_OF[step.type]!;
    // A message is sent at most once: a SENT attempt completes the step, and a send that
    // may have happened before a crash (still SENDING) is not repeated.
    const previous = await this.sql.attemptsForStep(run.id, index);
    if (previous.some((a) => a.status === 'SENT')) return { kind: 'completed' };
    const underWay = previous.filter((a) => a.status === 'SENDING');
    if (underWay.length) {
      // Its attempt is settled with the step, not left SENDING for ever.
      const error = STOPPED_WHILE_SENDING;
      const now = isoNow();
      for (const { id } of underWay) exec.ops.push((s) => s.markAttempt({ id, status: 'FAILED', providerMessageId: null, error, now }));
      return { kind: 'failed', error };
    }
    const template = await this.sql.template(Number(step.templateId), run.workspace_id);
    if (!template) return { kind: 'failed', error: `template ${step.templateId} does not exist in this workspace` };
    if (template.channel !== channel) return { kind: 'failed', error: `template ${template.id} is a ${template.channel} template, not ${channel}` };
    const given = step.to !== undefined ? await renderString(String(step.to), ctx) : channel === 'EMAIL' ? contact?.row.email : contact?.row.phone;
    const recipient = recipientOf(channel, given ?? '', step.to !== undefined, this.config.defaultPhoneRegion);
    const rendered = await renderContent(JSON.parse(template.content) as Record<string, unknown>, ctx);
    const attempt = previous.length + 1;
    state.attempts = attempt;
    const row = {
      workspaceId: run.workspace_id,
      channel,
      to: recipient.ok ? recipient.to : recipient.shown,
      attempt,
      runId: run.id,
      stepIndex: index,
      templateId: template.id,
      rendered: JSON.stringify(rendered),
    };
    const configured = run.sandbox ? 'outbox' : ((await this.sql.provider(run.workspace_id, channel)) ?? 'outbox');

    if (!recipient.ok) {
      // Refused before any provider (the outbox too) sees it, and not retried: the run's
      // trigger renders the same again. The try is recorded, saying why the message did not go.
      const { error } = recipient;
      exec.ops.push((s) => s.insertAttempt({ ...row, provider: configured, status: 'FAILED', providerMessageId: null, error }));
      countDelivery(channel, configured, 'FAILED');
      return { kind: 'failed', error };
    }
    const to = recipient.to;

    if (configured === 'outbox') {
      // The outbox only records: the attempt is one more queued write of this run.
      const providerMessageId = `outbox-${randomUUID()}`;
      exec.ops.push((s) => s.insertAttempt({ ...row, provider: 'outbox', status: 'SENT', providerMessageId, error: null }));
      countDelivery(channel, 'outbox', 'SENT');
      return { kind: 'completed' };
    }
    let resolved: ResolvedChannel;
    try {
      resolved = await resolveChannel(this.db, this.config, run.workspace_id, channel);
    } catch (err) {
      if (!(err instanceof ChannelUnusableError)) throw err;
      const { provider, message } = err;
      exec.ops.push((s) => s.insertAttempt({ ...row, provider, status: 'FAILED', providerMessageId: null, error: message }));
      countDelivery(channel, err.provider, 'FAILED');
      return { kind: 'failed', error: err.message };
    }

    // The SENDING row is committed with the run's progress, under its lease, once the message
    // has its turn (a slot of its destination) and before it leaves: a message still waiting
    // for its turn when the process stops has no such row, and is sent after the restart.
    // Settings changed while it waited (another provider, a rotated password, the outbox) are
    // the ones it goes with: it starts again from them.
    let attemptId: number | undefined;
    const onStart = async () => {
      if (changes < MAX_CHANNEL_CHANGES && !sameChannel(resolved, await resolveChannel(this.db, this.config, run.workspace_id, channel)))
        throw new ChannelChanged();
      await this.beforeNetwork(exec, [
        (s) =>
          then(s.insertAttempt({ ...row, provider: resolved.provider, status: 'SENDING', providerMessageId: null, error: null }), (id) => {
            attemptId = id;
          }),
      ]);
    };
    let result: SendResult;
    try {
      result = await providerFor(resolved.provider).send({ channel, to, rendered }, resolved.settings, resolved.credentials, {
        timeoutMs: this.config.httpTimeoutMs,
        outbound: this.outbound,
        onStart,
      });
    } catch (err) {
      if (err instanceof ChannelChanged || err instanceof ChannelUnusableError) return this.send(exec, index, step, state, ctx, contact, changes + 1);
      // The run stopped (shutdown, a lost lease) at its turn: nothing left.
      if (attemptId === undefined) throw err;
      // Providers answer rather than throw; this is a bug, but the message may deserve a retry.
      result = { ok: false, transient: true, error: `${resolved.provider}: unexpected error: ${(err as Error).message ?? String(err)}` };
    }
    const now = isoNow();
    if (attemptId === undefined) {
      // It never left (a refused destination, a rate-limit block): the try is recorded with the run's progress.
      const failure = result.ok ? null : clip(result.error);
      exec.ops.push((s) =>
        s.insertAttempt({
          ...row,
          provider: resolved.provider,
          status: result.ok ? 'SENT' : 'FAILED',
          providerMessageId: result.ok ? result.providerMessageId : null,
          error: failure,
        }),
      );
    } else {
      // What the provider answered is a fact whatever became of the lease: recorded regardless.
      const mark: AttemptMark = result.ok
        ? { id: attemptId, status: 'SENT', providerMessageId: result.providerMessageId, error: null, now }
        : { id: attemptId, status: 'FAILED', providerMessageId: null, error: clip(result.error), now };
      void this.committer.always((s) => s.markAttempt(mark));
    }
    countDelivery(channel, resolved.provider, result.ok ? 'SENT' : 'FAILED');
    if (result.ok) return { kind: 'completed' };
    // A rate-limit answer defers the send to the time the provider named; it is no failed try.
    const retryAfterMs = (result as { retryAfterMs?: number }).retryAfterMs;
    if (retryAfterMs !== undefined && (state.deferrals ?? 0) < MAX_DEFERRALS) {
      state.deferrals = (state.deferrals ?? 0) + 1;
      return { kind: 'wait', until: Date.now() + retryAfterMs, error: `attempt ${attempt} was rate limited: ${result.error}` };
    }
    const tries = attempt - (state.deferrals ?? 0);
    if (result.transient && tries < this.config.deliveryMaxAttempts) {
      return { kind: 'wait', until: Date.now() + retryDelayMs(this.config, tries), error: `attempt ${attempt} failed: ${result.error}` };
    }
    return { kind: 'failed', error: result.error };
  }
}

type Recipient = { ok: true; to: string } | { ok: false; error: string; shown: string };

/**
 * The one address a send step goes to, normalised as a contact's own is (an email address
 * lower-cased and trimmed; a phone number, for SMS and WhatsApp alike, in E.164 from the
 * configured default region), or why there is none. A rendered `to` comes from whoever
 * can post to the webhook: a list ("a@x.co, b@x.co") or a value with header lines in it
 * must never reach a provider, which would read it as several recipients.
 */
function recipientOf(channel: Channel, value: string, rendered: boolean, defaultRegion: string): Recipient {
  const kind = channel === 'EMAIL' ? 'email address' : 'phone number';
  const trimmed = value.trim();
  // Kept on the attempt as given, bounded, with control characters (a CRLF, U+0000, which
  // PostgreSQL refuses) and lone surrogates replaced: the record shows the value, never a header line.
  const shown = clip(trimmed.replace(/[\p{Cc}\p{Cs}]/gu, '\uFFFD'));
  if (trimmed === '') return { ok: false, shown, error: rendered ? `the recipient ("to") rendered empty: no ${kind} to send to` : `no ${kind} to send to` };
  const to = channel === 'EMAIL' ? normalizeEmail(trimmed) : normalizePhone(trimmed, defaultRegion);
  if (to) return { ok: true, to };
  return {
    ok: false,
    shown,
    error: `the recipient ${JSON.stringify(trimmed.slice(0, 100))} is not ${channel === 'EMAIL' ? 'one email address' : 'a valid phone number'}`,
  };
}

/** Provider and error texts are bounded so a chatty provider cannot bloat the table. */
function clip(text: string): string {
  return text.length > 1000 ? `${text.slice(0, 999)}…` : text;
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
