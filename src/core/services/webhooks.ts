import { isUtf8 } from 'node:buffer';
import { createHash, createHmac, createSecretKey, type KeyObject } from 'node:crypto';
import { eq } from 'drizzle-orm';
import { recordAudit } from '../audit.js';
import type { Config } from '../config.js';
import { inWorkspace, selectPage, withTransaction, type WorkspaceContext } from '../context.js';
import { safeEqual } from '../crypto.js';
import type { Db } from '../db/connection.js';
import { stmt, type Intake, type IntakeJob, type WorkflowRowRaw } from '../db/intake.js';
import type { Store } from '../db/store.js';
import { countRunStarted } from '../db/runCounts.js';
import { contacts, webhookEvents, workflowRuns, workflows, type ContactDefaults, type LookupKind, type StepDefinition } from '../db/schema.js';
import { AppError, ConflictError, isIdentityEncoding, NotFoundError, UnauthorizedError, unsupportedEncoding, ValidationError } from '../errors.js';
import { parsePath, readPath, type PathSegment } from '../jsonPath.js';
import type { Page } from '../pagination.js';
import { decryptSecret } from '../secrets.js';
import { jsonDepthExceeds, normalizeEmail, normalizePhone } from '../validation.js';
import { createContactId } from './contacts.js';
import { WEBHOOK_TOKEN_LENGTH } from './workflows.js';

export const SIGNATURE_HEADER = 'x-service-signature';
export const IDEMPOTENCY_WINDOW_MS = 24 * 3600_000;
/** Deeper bodies are refused (422): real senders nest a handful of levels, not hundreds. */
export const MAX_BODY_DEPTH = 64;
const TOKEN_RE = new RegExp(`^[0-9A-Za-z]{${WEBHOOK_TOKEN_LENGTH}}$`);
const SIGNATURE_RE = /^sha256=([0-9a-f]{64})$/;
/**
 * API.md: "up to 255 chars", nothing more said: any text but control characters (a tab; HTTP
 * refuses the others), spaces and non-ASCII included (a header's bytes, as Node reads them).
 */
export function validIdempotencyKey(key: string): boolean {
  // Characters are code points: 128 `é` are 128 characters (API.md 4: up to 255 chars).
  if (key.length < 1 || (key.length > 255 && [...key].length > 255)) return false;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return false;
  }
  return true;
}
/** What is kept of a body refused before its signature was verified: its size, SHA-256 and this many first bytes. */
export const UNVERIFIED_BODY_PREFIX_BYTES = 1024;
const SIGNATURE_INVALID = 'signature_invalid';

/** What the receiver needs to know about the workflow behind a token. */
export interface WebhookTarget {
  workflowId: number;
  workspaceId: number;
  active: boolean;
  steps: StepDefinition[];
  lookup: LookupKind | null;
  path: PathSegment[] | null;
  createIfNotFound: boolean;
  defaults: ContactDefaults;
  secret: string | null;
}

export interface ReceivedRequest {
  raw: Buffer | null;
  contentType: string | null;
  sourceIp: string | null;
  signature?: string | undefined;
  idempotencyKey?: string | undefined;
}

export interface Accepted {
  runId: number;
  contactId: number;
  replayed: boolean;
}

/** Signing secrets as key objects: an HMAC keyed by one starts in half the time of one keyed by text. */
const signingKeys = new Map<string, KeyObject>();

function signingKey(secret: string): KeyObject {
  let key = signingKeys.get(secret);
  if (!key) {
    if (signingKeys.size > 10_000) signingKeys.clear();
    key = createSecretKey(Buffer.from(secret, 'utf8'));
    signingKeys.set(secret, key);
  }
  return key;
}

/** sha256=<lowercase hex> of HMAC-SHA256(secret, exact body bytes), compared in constant time. */
export function verifySignature(secret: string, raw: Buffer, header: string | undefined): boolean {
  const expected = `sha256=${createHmac('sha256', signingKey(secret)).update(raw).digest('hex')}`;
  if (header === undefined || !SIGNATURE_RE.test(header)) {
    safeEqual(expected, expected);
    return false;
  }
  return safeEqual(expected, header);
}

export type LookupValue = { kind: 'email' | 'phone'; value: string } | { kind: 'contactId'; value: number };

/** Reads and checks the lookup value at the workflow's path (422 when missing or of the wrong shape). */
export function extractLookup(target: Pick<WebhookTarget, 'lookup' | 'path'>, body: Record<string, unknown>, defaultRegion: string): LookupValue {
  const kind = target.lookup;
  if (!kind) throw new ValidationError('webhook_lookup_required', 'The workflow has no contact lookup configured');
  const raw = readPath(body, target.path ?? [kind]);
  if (raw === undefined || raw === null || raw === '') {
    throw new ValidationError('lookup_value_missing', `The body has no value at the lookup path for ${kind}`);
  }
  const invalid = (what: string) => new ValidationError('lookup_value_invalid', `The value at the lookup path is not ${what}`);
  switch (kind) {
    case 'email': {
      const email = typeof raw === 'string' ? normalizeEmail(raw) : undefined;
      if (!email) throw invalid('an email address');
      return { kind, value: email };
    }
    case 'phone': {
      const phone = typeof raw === 'string' ? normalizePhone(raw, defaultRegion) : undefined;
      if (!phone) throw invalid('a phone number');
      return { kind, value: phone };
    }
    case 'contactId': {
      // An integer, or a string of digits and nothing else (API.md 4). One no contact can have
      // (0, negative, past 2^53) is a miss, 404 like any other id (0 matches no row), not a
      // value of the wrong shape.
      const id = typeof raw === 'number' ? (Number.isInteger(raw) ? raw : NaN) : typeof raw === 'string' && /^[0-9]+$/.test(raw) ? Number(raw) : NaN;
      if (Number.isNaN(id)) throw invalid('a contact id (an integer or a string of digits)');
      return { kind, value: Number.isSafeInteger(id) && id >= 1 ? id : 0 };
    }
  }
}

type Outcome = { ok: true; accepted: Accepted } | { ok: false; error: AppError } | { ok: false; contactGone: true };

/** What the route knows before it reads the body. */
export interface RequestHead {
  contentType: string | null;
  contentLength: number | null;
  /** Content-Encoding as sent; only none or `identity` is taken. */
  contentEncoding?: string | undefined;
}

/**
 * Whether the body has at most `max` opening brackets, so cannot nest deeper than that: most
 * bodies are settled by this count of bytes without walking the parsed value.
 */
function fewerBrackets(raw: Buffer, max: number): boolean {
  let n = 0;
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i];
    if ((c === 0x7b || c === 0x5b) && ++n > max) return false;
  }
  return true;
}

const JSON_TYPE_RE = /^application\/json\s*(;.*)?$/i;
const notFound = () => new NotFoundError('webhook_not_found', 'No active webhook workflow has this URL');

/** A JSON body's text: a UTF-8 byte order mark before it is dropped, as RFC 8259 (8.1) lets a parser do (the signature is over the bytes as sent). */
function jsonTextOf(raw: Buffer): string {
  const text = raw.toString('utf8');
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

/**
 * Body checks in the contract's order after the token: signature, Idempotency-Key, JSON,
 * object, lookup. Every refusal but the first comes after the signature held (or the
 * workflow has no secret), so only those bodies are kept whole and can be replayed.
 */
function evaluateBody(target: WebhookTarget, req: ReceivedRequest & { raw: Buffer }, defaultRegion: string): { text: string; lookup: LookupValue } {
  if (target.secret !== null && !verifySignature(target.secret, req.raw, req.signature)) {
    throw new UnauthorizedError(SIGNATURE_INVALID, `The ${SIGNATURE_HEADER} header is missing or does not match the body`);
  }
  if (req.idempotencyKey !== undefined && !validIdempotencyKey(req.idempotencyKey)) {
    throw new AppError(400, 'invalid_idempotency_key', 'Idempotency-Key must be 1 to 255 characters, none of them a control character (such as a tab)');
  }
  // JSON between systems is UTF-8 (RFC 8259, 8.1), whatever a charset parameter says: other
  // bytes would be read as U+FFFD and stored so, a corrupted name or address accepted.
  if (!isUtf8(req.raw)) throw new AppError(400, 'invalid_json', 'The body is not valid JSON: it is not UTF-8 text');
  const text = jsonTextOf(req.raw);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new AppError(400, 'invalid_json', 'The body is not valid JSON');
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new ValidationError('body_not_object', 'The body must be a JSON object');
  if (!fewerBrackets(req.raw, MAX_BODY_DEPTH) && jsonDepthExceeds(parsed, MAX_BODY_DEPTH))
    throw new ValidationError('body_too_deep', `The body nests more than ${MAX_BODY_DEPTH} levels deep`);
  return { text, lookup: extractLookup(target, parsed as Record<string, unknown>, defaultRegion) };
}

/**
 * The inbound webhook, from token to durable run.
 *
 * Active workflows are cached by token, because a read outside a transaction costs more
 * than the rest of the request. The cache never decides an outcome on its own: a 202 is
 * given only after the workflow row, re-read inside the committing transaction, is found
 * unchanged (or the request is re-checked against the new row there), and every refusal
 * is re-checked against a fresh read first. So an activation, pause, secret rotation or
 * path change made by any process (the CLI, another server or node) applies to the next
 * request. Writes go through the store's group commit (db/intake.ts); a 202 is only
 * answered after COMMIT. The writes are generators that yield one statement at a time, so
 * the same rules run synchronously on SQLite and awaited on PostgreSQL.
 */
export class WebhookReceiver {
  private readonly secrets = new Map<string, string>();
  private readonly parsed = new Map<number, { row: WorkflowRowRaw; target: WebhookTarget; stepsJson: string }>();
  private readonly activeByToken = new Map<string, WebhookTarget>();
  private batchReads: { batch: unknown; targets: Map<number, WebhookTarget | undefined> } = { batch: undefined, targets: new Map() };
  /** Requests under way that may create a contact, by workflow and Idempotency-Key: the last one's outcome. */
  private readonly keyed = new Map<string, Promise<unknown>>();

  constructor(
    private readonly store: Store,
    private readonly config: Config,
    private readonly intake: Intake,
  ) {}

  /** The workflow behind a token, active or not; undefined when no workflow has it. */
  async target(token: string, opts: { fresh?: boolean } = {}): Promise<WebhookTarget | undefined> {
    if (!TOKEN_RE.test(token)) return undefined;
    if (!opts.fresh) {
      const cached = this.activeByToken.get(token);
      if (cached) return cached;
    }
    const row = await this.intake.read.workflowByToken(token);
    if (!row) {
      this.activeByToken.delete(token);
      return undefined;
    }
    const target = this.fromRow(row);
    if (target.active) {
      if (this.activeByToken.size > 10_000) this.activeByToken.clear();
      this.activeByToken.set(token, target);
    } else this.activeByToken.delete(token);
    return target;
  }

  private fromRow(row: WorkflowRowRaw): WebhookTarget {
    const cached = this.parsed.get(row.id);
    if (cached && sameRow(cached.row, row)) return cached.target;
    const target: WebhookTarget = {
      workflowId: row.id,
      workspaceId: row.workspace_id,
      active: row.status === 'ACTIVE' && row.trigger_source === 'WEBHOOK',
      steps: JSON.parse(row.steps) as StepDefinition[],
      lookup: row.webhook_lookup,
      path: row.webhook_path ? (parsePath(row.webhook_path) ?? null) : null,
      createIfNotFound: row.create_if_not_found === 1,
      defaults: JSON.parse(row.contact_defaults) as ContactDefaults,
      secret: row.signing_secret ? this.decrypt(row.signing_secret) : null,
    };
    if (this.parsed.size > 10_000) this.parsed.clear();
    this.parsed.set(row.id, { row, target, stepsJson: row.steps });
    return target;
  }

  private decrypt(ciphertext: string): string {
    let plain = this.secrets.get(ciphertext);
    if (plain === undefined) {
      plain = decryptSecret(this.config, ciphertext);
      if (this.secrets.size > 10_000) this.secrets.clear();
      this.secrets.set(ciphertext, plain);
    }
    return plain;
  }

  /**
   * The checks before the body is read: token (404), Content-Type (415), declared size
   * (413). Returns the target, or throws the refusal after recording it when the token is
   * known.
   */
  async admit(token: string, head: RequestHead, req: ReceivedRequest): Promise<WebhookTarget> {
    const check = (target: WebhookTarget | undefined): AppError | undefined => (target?.active ? this.headError(head) : notFound());
    let target = await this.target(token);
    let error = check(target);
    if (error && target?.active) {
      target = await this.target(token, { fresh: true });
      error = check(target);
    }
    if (!error) return target!;
    throw target ? await this.refuse(target, error, req) : error;
  }

  /**
   * admit() without waiting, for most requests: the token's workflow is cached as active and
   * the head is one it takes. Undefined otherwise, and then admit() decides (and records).
   */
  admitCached(token: string, head: RequestHead): WebhookTarget | undefined {
    const target = this.activeByToken.get(token);
    return target && !this.headError(head) ? target : undefined;
  }

  /** What an active workflow refuses of a request's head: its Content-Type (415) or declared size (413). */
  private headError(head: RequestHead): AppError | undefined {
    if (!head.contentType || !JSON_TYPE_RE.test(head.contentType))
      return new AppError(415, 'unsupported_media_type', 'Send the body with Content-Type: application/json');
    if (head.contentEncoding !== undefined && !isIdentityEncoding(head.contentEncoding)) return unsupportedEncoding();
    if (head.contentLength !== null && head.contentLength > this.config.webhookBodyLimit) return this.tooLarge();
    return undefined;
  }

  tooLarge(): AppError {
    return new AppError(413, 'payload_too_large', `The body is larger than ${this.config.webhookBodyLimit} bytes`);
  }

  /**
   * Records a refused request against its workflow (durably) and returns the error to
   * answer with. Unless `verified` (the signature held, or there is no secret), only the
   * body's size, SHA-256 and first 1 KiB are kept.
   */
  async refuse(target: WebhookTarget, error: AppError, req: ReceivedRequest, verified = false): Promise<AppError> {
    await this.intake.run(() => this.insertEvent(target, req, { statusCode: error.status, code: error.code }, verified));
    return error;
  }

  /**
   * Checks signature, JSON and lookup, then resolves the contact and starts the run. `held`:
   * the caller already waits its turn for the request's Idempotency-Key (oneAtATime).
   */
  async receive(target: WebhookTarget, req: ReceivedRequest & { raw: Buffer }, attempt = 0, held = false): Promise<Accepted> {
    let checked: { text: string; lookup: LookupValue };
    try {
      checked = evaluateBody(target, req, this.config.defaultPhoneRegion);
    } catch (err) {
      if (!(err instanceof AppError)) throw err;
      // Refuse only what the workflow as it is now refuses.
      const fresh = await this.freshTarget(target);
      if (fresh === target) throw await this.refuse(target, err, req, err.code !== SIGNATURE_INVALID);
      if (!fresh?.active) throw fresh ? await this.refuse(fresh, notFound(), req) : notFound();
      return this.receive(fresh, req, attempt, held);
    }
    // Repeats of one Idempotency-Key that may create a contact wait for each other: sent at
    // once, each found no contact and no accepted key yet, and each created its contact,
    // though all but the first were then answered as replays (a replay leaves nothing).
    if (!held && req.idempotencyKey && target.createIfNotFound && checked.lookup.kind !== 'contactId')
      return this.oneAtATime(`${target.workflowId}\u0000${req.idempotencyKey}`, () => this.acceptChecked(target, req, checked, attempt, true));
    return this.acceptChecked(target, req, checked, attempt, held);
  }

  /** receive() once the body passed its checks: the contact, then the run. */
  private async acceptChecked(
    target: WebhookTarget,
    req: ReceivedRequest & { raw: Buffer },
    checked: { text: string; lookup: LookupValue },
    attempt: number,
    held: boolean,
  ): Promise<Accepted> {
    // A contact to create is created first, in a transaction of its own: creating a contact
    // is the contacts service's work (normalising, tags, audit).
    const known = target.createIfNotFound && checked.lookup.kind !== 'contactId' ? await this.createMissingContact(target, req, checked.lookup) : undefined;
    const outcome = await this.intake.run((batch) => this.accept(batch, target, req, checked.text, checked.lookup, known));
    if (outcome.ok) return outcome.accepted;
    if ('error' in outcome) throw outcome.error;
    // No contact after all: deleted in between, or the workflow changed before the batch
    // (and with it what to create). Once more from the workflow as it is now.
    if (attempt >= 2) throw new AppError(409, 'contact_changed', 'The contact changed while this request was accepted; send it again');
    const fresh = await this.freshTarget(target);
    if (!fresh?.active) throw fresh ? await this.refuse(fresh, notFound(), req) : notFound();
    return this.receive(fresh, req, attempt + 1, held);
  }

  /** Runs `work` after every earlier one of the same key has settled (a chain per key, dropped when idle). */
  private async oneAtATime<T>(key: string, work: () => Promise<T>): Promise<T> {
    const before = this.keyed.get(key);
    const mine = (before ? before.then(work, work) : work()) as Promise<T>;
    const settled = mine.then(
      () => undefined,
      () => undefined,
    );
    this.keyed.set(key, settled);
    try {
      return await mine;
    } finally {
      if (this.keyed.get(key) === settled) this.keyed.delete(key);
    }
  }

  /**
   * For a workflow that creates contacts: when no contact matches, the workflow is still as
   * the request was checked against, and this is not a replay of an accepted request,
   * creates it (two requests for one new email at once: the second finds the first's).
   * Answers the contact's id when it found or created one (the batch may take it as it is:
   * IntakeSql.contactId).
   */
  private async createMissingContact(target: WebhookTarget, req: ReceivedRequest, lookup: LookupValue): Promise<number | undefined> {
    if (lookup.kind === 'contactId' || !target.createIfNotFound) return undefined;
    const found = await this.intake.read.contactId(target.workspaceId, lookup.kind, lookup.value);
    if (found !== undefined) return found;
    // Paused, deleted or changed since it was cached: the batch decides, and creates nothing.
    if ((await this.freshTarget(target)) !== target) return undefined;
    if (req.idempotencyKey && (await this.intake.read.firstByIdempotencyKey(target.workflowId, req.idempotencyKey, idempotencySince()))) return undefined;
    const ctx = {
      db: this.store.db,
      store: this.store,
      config: this.config,
      workspaceId: target.workspaceId,
      actor: webhookActor(target.workflowId),
      ip: null,
    };
    return resolveContact(ctx, target, lookup);
  }

  /** The target as its row (read outside a batch) is now; the same object when nothing changed. */
  private async freshTarget(target: WebhookTarget): Promise<WebhookTarget | undefined> {
    const row = await this.intake.read.workflowById(target.workflowId);
    return row && this.remember(row);
  }

  private remember(row: WorkflowRowRaw): WebhookTarget {
    const fresh = this.fromRow(row);
    if (row.webhook_token) {
      if (fresh.active) this.activeByToken.set(row.webhook_token, fresh);
      else this.activeByToken.delete(row.webhook_token);
    }
    return fresh;
  }

  /** The target as its row is now, read once per batch transaction. */
  private *currentInBatch(batch: unknown, target: WebhookTarget): IntakeJob<WebhookTarget | undefined> {
    if (this.batchReads.batch !== batch) this.batchReads = { batch, targets: new Map() };
    const targets = this.batchReads.targets;
    if (!targets.has(target.workflowId)) {
      const row = yield* stmt((s) => s.workflowById(target.workflowId));
      const fresh = row && this.remember(row);
      // Another batch (PostgreSQL runs several at once) may have taken the cache meanwhile.
      if (this.batchReads.batch !== batch) this.batchReads = { batch, targets: new Map() };
      this.batchReads.targets.set(target.workflowId, fresh);
      return fresh;
    }
    return targets.get(target.workflowId);
  }

  /** Runs inside the batch transaction: everything here commits together or not at all. */
  private *accept(
    batch: unknown,
    target: WebhookTarget,
    req: ReceivedRequest & { raw: Buffer },
    triggerJson: string,
    lookup: LookupValue,
    known: number | undefined,
  ): IntakeJob<Outcome> {
    // Re-read the workflow under the write lock (cheap inside a transaction): the run must
    // follow the configuration as it is at commit time.
    const current = yield* this.currentInBatch(batch, target);
    if (current !== target) {
      if (!current?.active) {
        const error = notFound();
        if (current) yield* this.insertEvent(current, req, { statusCode: error.status, code: error.code }, false);
        return { ok: false, error };
      }
      try {
        ({ text: triggerJson, lookup } = evaluateBody(current, req, this.config.defaultPhoneRegion));
      } catch (err) {
        if (!(err instanceof AppError)) throw err;
        yield* this.insertEvent(current, req, { statusCode: err.status, code: err.code }, err.code !== SIGNATURE_INVALID);
        return { ok: false, error: err };
      }
      target = current;
      // Found for the lookup as it was.
      known = undefined;
    }
    if (req.idempotencyKey) {
      const key = req.idempotencyKey;
      const first = yield* stmt((s) => s.firstByIdempotencyKey(target.workflowId, key, idempotencySince()));
      if (first?.run_id != null && first.contact_id != null) {
        yield* this.insertEvent(
          target,
          req,
          { statusCode: 202, code: 'idempotent_replay', runId: first.run_id, contactId: first.contact_id, replayOf: first.id },
          true,
        );
        return { ok: true, accepted: { runId: first.run_id, contactId: first.contact_id, replayed: true } };
      }
    }
    const contactId = yield* stmt((s) => s.contactId(target.workspaceId, lookup.kind, lookup.value, known));
    if (contactId === undefined && target.createIfNotFound && lookup.kind !== 'contactId') return { ok: false, contactGone: true };
    if (contactId === undefined) {
      const error = new NotFoundError(
        'contact_not_found',
        `No contact matches this ${lookup.kind}${lookup.kind === 'contactId' ? '' : ' and create-if-not-found is off'}`,
      );
      yield* this.insertEvent(target, req, { statusCode: 404, code: error.code }, true);
      return { ok: false, error };
    }
    const stepsJson = this.parsed.get(target.workflowId)?.stepsJson ?? JSON.stringify(target.steps);
    // The trigger is stored as the received text (already checked to be a JSON object).
    const { workspaceId, workflowId } = target;
    const runId = yield* stmt((s) => s.insertRun(workspaceId, workflowId, contactId, stepsJson, triggerJson));
    yield* this.insertEvent(target, req, { statusCode: 202, code: null, runId, contactId }, true);
    return { ok: true, accepted: { runId, contactId, replayed: false } };
  }

  private *insertEvent(
    target: WebhookTarget,
    req: ReceivedRequest,
    result: { statusCode: number; code: string | null; runId?: number; contactId?: number; replayOf?: number },
    verified: boolean,
  ): IntakeJob<void> {
    const raw = req.raw;
    // An unauthenticated sender may post 1 MiB 120 times a minute: what was not verified
    // is kept as evidence (size, hash, a prefix to recognise it), not as a copy.
    const whole = raw === null || verified;
    const row = {
      workspaceId: target.workspaceId,
      workflowId: target.workflowId,
      statusCode: result.statusCode,
      code: result.code,
      runId: result.runId ?? null,
      contactId: result.contactId ?? null,
      sourceIp: req.sourceIp,
      contentType: req.contentType?.slice(0, 200) ?? null,
      // A valid key whole (255 characters may be 510 UTF-16 units: cut, it would never match its
      // repeat); a refused one's first 255 characters, as evidence.
      idempotencyKey:
        req.idempotencyKey === undefined
          ? null
          : validIdempotencyKey(req.idempotencyKey)
            ? req.idempotencyKey
            : [...req.idempotencyKey.slice(0, 510)].slice(0, 255).join(''),
      body: whole ? raw : Buffer.from(raw.subarray(0, UNVERIFIED_BODY_PREFIX_BYTES)),
      bodySize: raw?.length ?? null,
      bodySha256: whole ? null : createHash('sha256').update(raw).digest('hex'),
      replayOf: result.replayOf ?? null,
    };
    yield* stmt((s) => s.insertEvent(row));
  }
}

function sameRow(a: WorkflowRowRaw, b: WorkflowRowRaw): boolean {
  return (
    a.status === b.status &&
    a.trigger_source === b.trigger_source &&
    a.steps === b.steps &&
    a.webhook_lookup === b.webhook_lookup &&
    a.webhook_path === b.webhook_path &&
    a.create_if_not_found === b.create_if_not_found &&
    a.contact_defaults === b.contact_defaults &&
    a.signing_secret === b.signing_secret &&
    a.webhook_token === b.webhook_token
  );
}

function idempotencySince(): string {
  return new Date(Date.now() - IDEMPOTENCY_WINDOW_MS).toISOString();
}

function webhookActor(workflowId: number) {
  return { type: 'SYSTEM' as const, id: null, label: `webhook:workflow:${workflowId}` };
}

/** Finds the contact the lookup names, creating it when the workflow says so (email and phone only). */
export async function resolveContact(
  ctx: WorkspaceContext,
  target: Pick<WebhookTarget, 'createIfNotFound' | 'defaults'>,
  lookup: LookupValue,
): Promise<number | undefined> {
  const column = lookup.kind === 'contactId' ? contacts.id : lookup.kind === 'email' ? contacts.email : contacts.phone;
  const find = async () =>
    (
      await ctx.db
        .select({ id: contacts.id })
        .from(contacts)
        .where(inWorkspace(ctx, contacts.workspaceId, eq(column, lookup.value)))
        .limit(1)
    )[0]?.id;
  const found = await find();
  if (found !== undefined) return found;
  if (lookup.kind === 'contactId' || !target.createIfNotFound) return undefined;
  const d = target.defaults;
  try {
    return await createContactId(ctx, {
      [lookup.kind]: lookup.value,
      ...(d.firstName !== undefined ? { firstName: d.firstName } : {}),
      ...(d.lastName !== undefined ? { lastName: d.lastName } : {}),
      ...(d.attributes !== undefined ? { attributes: d.attributes } : {}),
      ...(d.tags !== undefined ? { tags: d.tags } : {}),
    });
  } catch (err) {
    // Created by someone else since the read above (another request for the same new
    // address): use theirs.
    if (err instanceof ConflictError) {
      const now = await find();
      if (now !== undefined) return now;
    }
    throw err;
  }
}

/** Inserts a QUEUED run with a snapshot of the workflow's steps. */
export async function startRun(
  db: Db,
  target: Pick<WebhookTarget, 'workflowId' | 'workspaceId' | 'steps'>,
  contactId: number,
  trigger: Record<string, unknown>,
): Promise<number> {
  const [run] = await db
    .insert(workflowRuns)
    .values({ workspaceId: target.workspaceId, workflowId: target.workflowId, contactId, definition: target.steps, trigger })
    .returning({ id: workflowRuns.id });
  await countRunStarted(db, target.workspaceId);
  return run!.id;
}

export interface WebhookEventView {
  id: number;
  workflowId: number;
  receivedAt: string;
  statusCode: number;
  code: string | null;
  runId: number | null;
  contactId: number | null;
  sourceIp: string | null;
  contentType: string | null;
  idempotencyKey: string | null;
  /** The body as JSON when it parsed as JSON, else null (see bodyText). */
  body: unknown;
  /** The body as text when it was not valid JSON, or when only its first 1 KiB was kept; null otherwise. */
  bodyText: string | null;
  /** Bytes received; null when the body was not read. */
  bodySize: number | null;
  /** True when body/bodyText hold only the first 1 KiB of a longer body (kept so for a request refused before its signature was verified). */
  bodyTruncated: boolean;
  /** SHA-256 (hex) of the whole body, for a request refused before its signature was verified; else null. */
  bodySha256: string | null;
}

function eventView(row: typeof webhookEvents.$inferSelect): WebhookEventView {
  let body: unknown = null;
  let bodyText: string | null = null;
  const truncated = row.bodySha256 !== null && row.body !== null && row.body.length < (row.bodySize ?? 0);
  if (row.body && truncated) bodyText = row.body.toString('utf8');
  else if (row.body) {
    const text = jsonTextOf(row.body);
    try {
      body = JSON.parse(text);
    } catch {
      bodyText = text;
    }
    // A refused body may nest too deep to serialise again: show it as text.
    if (body !== null && jsonDepthExceeds(body, MAX_BODY_DEPTH)) {
      body = null;
      bodyText = text;
    }
  }
  return {
    id: row.id,
    workflowId: row.workflowId,
    receivedAt: row.receivedAt,
    statusCode: row.statusCode,
    code: row.code,
    runId: row.runId,
    contactId: row.contactId,
    sourceIp: row.sourceIp,
    contentType: row.contentType,
    idempotencyKey: row.idempotencyKey,
    body,
    bodyText,
    bodySize: row.bodySize ?? row.body?.length ?? null,
    bodyTruncated: truncated,
    bodySha256: row.bodySha256,
  };
}

export async function listWebhookEvents(
  ctx: WorkspaceContext,
  workflowId: number,
  opts: { limit: number; cursor?: string | undefined },
): Promise<Page<WebhookEventView>> {
  const [workflow] = await ctx.db
    .select({ id: workflows.id })
    .from(workflows)
    .where(inWorkspace(ctx, workflows.workspaceId, eq(workflows.id, workflowId)));
  if (!workflow) throw new NotFoundError('workflow_not_found', `No workflow with id ${workflowId}`);
  return selectPage(ctx, webhookEvents, { ...opts, workspaceScope: { parent: webhookEvents.workflowId, id: workflowId } }, eventView);
}

/** The workspace an event belongs to, for operator commands that name it by id alone. */
export async function webhookEventWorkspaceId(ctx: { db: Db }, id: number): Promise<number> {
  const [row] = await ctx.db.select({ workspaceId: webhookEvents.workspaceId }).from(webhookEvents).where(eq(webhookEvents.id, id));
  if (!row) throw new NotFoundError('webhook_event_not_found', `No webhook event with id ${id}`);
  return row.workspaceId;
}

/**
 * Starts a new run from a stored event's bytes, with the workflow's current lookup, path
 * and steps: fix a path, then replay what was refused. Bytes refused for a bad signature
 * are never replayed, nor events whose body was not read.
 */
export function replayWebhookEvent(ctx: WorkspaceContext, eventId: number): Promise<{ runId: number; contactId: number }> {
  return withTransaction(ctx, async (tx) => {
    const [event] = await tx.db
      .select()
      .from(webhookEvents)
      .where(inWorkspace(tx, webhookEvents.workspaceId, eq(webhookEvents.id, eventId)));
    if (!event) throw new NotFoundError('webhook_event_not_found', `No webhook event with id ${eventId}`);
    if (!event.body) throw new ValidationError('event_not_replayable', 'This event was refused before its body was read; there is nothing to replay');
    if (!signatureHeld(event))
      throw new ValidationError('event_not_replayable', 'This event was refused before its signature was verified; it cannot be replayed');
    const [row] = await tx.db
      .select()
      .from(workflows)
      .where(inWorkspace(tx, workflows.workspaceId, eq(workflows.id, event.workflowId)));
    if (!row) throw new NotFoundError('workflow_not_found', `No workflow with id ${event.workflowId}`);
    // As its URL does (SPEC 3): a paused workflow runs nothing, nor one whose trigger is no
    // longer its webhook; as POST /automations/:id/runs refuses an automation not ACTIVE.
    if (row.status !== 'ACTIVE') throw new ValidationError('workflow_not_active', `Workflow ${row.id} is ${row.status}: activate it to replay its events`);
    if (row.triggerSource !== 'WEBHOOK')
      throw new ValidationError(
        'workflow_not_webhook',
        `Workflow ${row.id} is no longer triggered by its webhook (trigger ${row.triggerSource}); its events cannot be replayed`,
      );
    let body: unknown;
    try {
      body = JSON.parse(jsonTextOf(event.body));
    } catch {
      throw new ValidationError('event_not_replayable', 'The stored body is not valid JSON');
    }
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw new ValidationError('event_not_replayable', 'The stored body is not a JSON object');
    if (jsonDepthExceeds(body, MAX_BODY_DEPTH))
      throw new ValidationError('event_not_replayable', `The stored body nests more than ${MAX_BODY_DEPTH} levels deep`);
    const target = {
      workflowId: row.id,
      workspaceId: row.workspaceId,
      steps: row.steps,
      lookup: row.webhookLookup,
      path: row.webhookPath ? (parsePath(row.webhookPath) ?? null) : null,
      createIfNotFound: row.createIfNotFound,
      defaults: row.contactDefaults,
    };
    const lookup = extractLookup(target, body as Record<string, unknown>, tx.config.defaultPhoneRegion);
    const contactId = await resolveContact(tx, target, lookup);
    if (contactId === undefined) throw new NotFoundError('contact_not_found', `No contact matches this ${lookup.kind}`);
    const runId = await startRun(tx.db, target, contactId, body as Record<string, unknown>);
    await recordAudit(tx, {
      workspaceId: ctx.workspaceId,
      action: 'webhook_event.replayed',
      target: { type: 'webhook_event', id: eventId },
      metadata: { runId, contactId },
    });
    return { runId, contactId };
  });
}

/**
 * Rows stored before body_size existed checked Idempotency-Key before the signature, and a
 * webhook_not_found refusal may not have reached the signature check at all.
 */
const UNVERIFIED_LEGACY_CODES = new Set(['invalid_idempotency_key', 'webhook_not_found']);

/** Whether an event's stored body passed the signature check (or its workflow had no secret). */
function signatureHeld(event: typeof webhookEvents.$inferSelect): boolean {
  if (event.bodySha256 !== null || event.code === SIGNATURE_INVALID) return false;
  return !(event.bodySize === null && event.code !== null && UNVERIFIED_LEGACY_CODES.has(event.code));
}
