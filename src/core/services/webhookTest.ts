import { eq } from 'drizzle-orm';
import { inWorkspace, type WorkspaceContext } from '../context.js';
import { contacts, workflows } from '../db/schema.js';
import { AppError, NotFoundError, ValidationError } from '../errors.js';
import { parsePath, readPath } from '../jsonPath.js';
import { jsonDepthExceeds } from '../validation.js';
import { extractLookup, MAX_BODY_DEPTH, SIGNATURE_HEADER, type LookupValue } from './webhooks.js';

/**
 * `POST /workflows/:id/webhook/test`: what a real POST of this body would do, without
 * doing it. The same checks as the receiver, in its order (workflow active, JSON object,
 * depth, lookup, contact), reading only: no event, run or contact is written. The
 * signature is not checked (the body arrives parsed, not as the sender's bytes); the
 * answer says whether one is required.
 */
export interface WebhookTestResult {
  /** Whether a real POST of this body would be answered 202 (given a valid signature when one is required). */
  wouldAccept: boolean;
  /** The status a real POST would get, and its problem code when refused. */
  status: number;
  code: string | null;
  detail: string | null;
  active: boolean;
  signatureRequired: boolean;
  signatureHeader: string;
  lookup: { kind: LookupValue['kind']; path: string; value: string | number } | null;
  contact: {
    /** `existing`: the run would be for this contact; `created`: it would be created; `missing`: refused. */
    outcome: 'existing' | 'created' | 'missing';
    id: number | null;
    email: string | null;
    phone: string | null;
    firstName: string | null;
    lastName: string | null;
  } | null;
}

export async function testWebhook(ctx: WorkspaceContext, workflowId: number, body: unknown): Promise<WebhookTestResult> {
  const [wf] = await ctx.db
    .select()
    .from(workflows)
    .where(inWorkspace(ctx, workflows.workspaceId, eq(workflows.id, workflowId)));
  if (!wf) throw new NotFoundError('workflow_not_found', `No workflow with id ${workflowId}`);
  const active = wf.status === 'ACTIVE' && wf.triggerSource === 'WEBHOOK' && wf.webhookToken !== null;
  const result: WebhookTestResult = {
    wouldAccept: false,
    status: 202,
    code: null,
    detail: null,
    active,
    signatureRequired: wf.signingSecret !== null,
    signatureHeader: SIGNATURE_HEADER,
    lookup: null,
    contact: null,
  };
  const refuse = (err: AppError) => {
    if (result.code !== null) return;
    result.status = err.status;
    result.code = err.code;
    result.detail = err.message;
  };
  if (!active) {
    const why = wf.triggerSource !== 'WEBHOOK' ? 'its trigger is not WEBHOOK' : 'it is not active';
    refuse(new NotFoundError('webhook_not_found', `A real POST would be refused: ${why}`));
  }

  if (!body || typeof body !== 'object' || Array.isArray(body)) {
    refuse(new ValidationError('body_not_object', 'The body must be a JSON object'));
    return result;
  }
  if (jsonDepthExceeds(body, MAX_BODY_DEPTH)) {
    refuse(new ValidationError('body_too_deep', `The body nests more than ${MAX_BODY_DEPTH} levels deep`));
    return result;
  }
  const path = wf.webhookPath ?? wf.webhookLookup;
  let lookup: LookupValue;
  try {
    lookup = extractLookup(
      { lookup: wf.webhookLookup, path: path ? (parsePath(path) ?? null) : null },
      body as Record<string, unknown>,
      ctx.config.defaultPhoneRegion,
    );
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    refuse(err);
    return result;
  }
  // An id no contact can have (0, past 2^53) is looked up as 0 and misses; the dry run shows
  // the id as sent, not that 0.
  const sent =
    lookup.kind === 'contactId' && lookup.value === 0 ? readPath(body as Record<string, unknown>, parsePath(path ?? 'contactId') ?? ['contactId']) : undefined;
  result.lookup = { kind: lookup.kind, path: path ?? lookup.kind, value: typeof sent === 'string' || typeof sent === 'number' ? sent : lookup.value };

  const column = lookup.kind === 'contactId' ? contacts.id : lookup.kind === 'email' ? contacts.email : contacts.phone;
  const [found] = await ctx.db
    .select({ id: contacts.id, email: contacts.email, phone: contacts.phone, firstName: contacts.firstName, lastName: contacts.lastName })
    .from(contacts)
    .where(inWorkspace(ctx, contacts.workspaceId, eq(column, lookup.value)))
    .limit(1);
  if (found) {
    result.contact = { outcome: 'existing', ...found };
  } else if (lookup.kind !== 'contactId' && wf.createIfNotFound) {
    const d = wf.contactDefaults;
    result.contact = {
      outcome: 'created',
      id: null,
      email: lookup.kind === 'email' ? lookup.value : null,
      phone: lookup.kind === 'phone' ? lookup.value : null,
      firstName: d.firstName ?? null,
      lastName: d.lastName ?? null,
    };
  } else {
    result.contact = { outcome: 'missing', id: null, email: null, phone: null, firstName: null, lastName: null };
    refuse(
      new NotFoundError('contact_not_found', `No contact matches this ${lookup.kind}${lookup.kind === 'contactId' ? '' : ' and create-if-not-found is off'}`),
    );
  }
  result.wouldAccept = result.code === null;
  return result;
}
