import type { StepDefinition } from './db/schema.js';
import { ValidationError, type FieldError } from './errors.js';
import { liquidSyntaxProblem } from './liquid.js';
import { literalRefusal, portOf, type OutboundPolicy } from '../engine/outbound.js';

/**
 * The step catalog shared by workflows (steps) and automations (nodes): each type with
 * the fields it takes. Strings marked liquid are templates checked for syntax at save time.
 */
export const STEP_TYPES = ['send_email', 'send_sms', 'send_whatsapp', 'wait', 'add_tags', 'remove_tags', 'update_contact', 'http_request', 'filter'] as const;
export type StepType = (typeof STEP_TYPES)[number];

export const MAX_STEPS = 100;
export const MAX_WAIT_SECONDS = 30 * 86_400;
export const HTTP_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;
const CONTACT_FIELDS = ['firstName', 'lastName', 'email', 'phone'];

type Fields = Record<string, unknown>;

class StepChecker {
  readonly errors: FieldError[] = [];
  /** policy: the outbound policy a literal destination is checked against as it is saved (none: not checked). */
  constructor(
    private readonly base: string,
    readonly policy?: OutboundPolicy,
  ) {}

  fail(field: string, message: string): void {
    this.errors.push({ path: `${this.base}${field ? `/${field}` : ''}`, message });
  }

  liquid(field: string, value: unknown, maxLength: number, required: boolean): void {
    if (value === undefined) {
      if (required) this.fail(field, 'is required');
      return;
    }
    if (typeof value !== 'string') return this.fail(field, 'must be string');
    if (value.length > maxLength) return this.fail(field, `must be at most ${maxLength} characters`);
    const problem = liquidSyntaxProblem(value);
    if (problem) this.fail(field, `template syntax error${problem.line ? ` at line ${problem.line}, column ${problem.col}` : ''}: ${problem.message}`);
  }

  integer(field: string, value: unknown, min: number, max: number): void {
    if (value === undefined) return this.fail(field, 'is required');
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) this.fail(field, `must be an integer from ${min} to ${max}`);
  }

  tags(field: string, value: unknown): void {
    if (!Array.isArray(value) || value.length < 1 || value.length > 100) return this.fail(field, 'must be an array of 1 to 100 tag names');
    value.forEach((t, i) => {
      if (typeof t !== 'string' || t.trim().length < 1 || [...t.trim()].length > 64) this.fail(`${field}/${i}`, 'must be 1 to 64 characters');
    });
  }

  /** Liquid inside any string of a JSON value (an http_request body). */
  jsonTemplates(field: string, value: unknown, depth = 0): void {
    if (depth > 20) return this.fail(field, 'is nested too deeply');
    if (typeof value === 'string') this.liquid(field, value, 100_000, true);
    else if (Array.isArray(value)) value.forEach((v, i) => this.jsonTemplates(`${field}/${i}`, v, depth + 1));
    else if (value && typeof value === 'object') for (const [k, v] of Object.entries(value)) this.jsonTemplates(`${field}/${k}`, v, depth + 1);
  }
}

const ALLOWED_FIELDS: Record<StepType, string[]> = {
  send_email: ['templateId', 'to'],
  send_sms: ['templateId', 'to'],
  send_whatsapp: ['templateId', 'to'],
  wait: ['seconds'],
  add_tags: ['tags'],
  remove_tags: ['tags'],
  update_contact: ['set'],
  http_request: ['method', 'url', 'headers', 'body'],
  filter: ['condition'],
};

/** Checks one step's fields (without `type`) and records problems under `base`. */
export function checkStepFields(type: StepType, fields: Fields, check: StepChecker): void {
  for (const key of Object.keys(fields)) if (!ALLOWED_FIELDS[type].includes(key)) check.fail(key, 'is not a known field');
  switch (type) {
    case 'send_email':
    case 'send_sms':
    case 'send_whatsapp':
      check.integer('templateId', fields.templateId, 1, Number.MAX_SAFE_INTEGER);
      check.liquid('to', fields.to, 500, false);
      break;
    case 'wait':
      check.integer('seconds', fields.seconds, 1, MAX_WAIT_SECONDS);
      break;
    case 'add_tags':
    case 'remove_tags':
      check.tags('tags', fields.tags);
      break;
    case 'update_contact': {
      const set = fields.set;
      if (!set || typeof set !== 'object' || Array.isArray(set) || Object.keys(set).length === 0 || Object.keys(set).length > 50) {
        check.fail('set', 'must be an object of 1 to 50 fields');
        break;
      }
      for (const [key, value] of Object.entries(set)) {
        const attr = /^attributes\.([^.]{1,100})$/.exec(key);
        if (!CONTACT_FIELDS.includes(key) && !attr) check.fail(`set/${key}`, `is not a contact field (use ${CONTACT_FIELDS.join(', ')} or attributes.<name>)`);
        // The one name the API's JSON parser refuses in attributes: it could never be read back.
        else if (attr?.[1] === '__proto__') check.fail(`set/${key}`, 'is not a name an attribute may have');
        else check.liquid(`set/${key}`, value, 10_000, true);
      }
      break;
    }
    case 'http_request': {
      if (typeof fields.method !== 'string' || !(HTTP_METHODS as readonly string[]).includes(fields.method))
        check.fail('method', `must be one of ${HTTP_METHODS.join(', ')}`);
      check.liquid('url', fields.url, 2000, true);
      if (typeof fields.url === 'string' && !/^(https?:\/\/|\{\{)/i.test(fields.url)) check.fail('url', 'must start with http:// or https://');
      else if (typeof fields.url === 'string' && check.policy) {
        const problem = literalDestinationProblem(fields.url, check.policy);
        if (problem) check.fail('url', problem);
      }
      if (fields.headers !== undefined) {
        if (!fields.headers || typeof fields.headers !== 'object' || Array.isArray(fields.headers)) check.fail('headers', 'must be an object of strings');
        else for (const [k, v] of Object.entries(fields.headers)) check.liquid(`headers/${k}`, v, 2000, true);
      }
      if (fields.body !== undefined) check.jsonTemplates('body', fields.body);
      break;
    }
    case 'filter':
      check.liquid('condition', fields.condition, 1000, true);
      if (typeof fields.condition === 'string') {
        const problem = conditionProblem(fields.condition);
        if (problem !== undefined) check.fail('condition', `is not a valid condition${problem ? `: ${problem}` : ''}`);
      }
      break;
  }
}

/**
 * Why a Liquid condition (as in filter steps and condition nodes) is not valid: undefined
 * when it is, '' when it is empty or would close the `{% if %}` it is evaluated in (`%}`),
 * else the parser's message.
 */
export function conditionProblem(condition: string): string | undefined {
  if (condition.trim() === '' || condition.includes('%}')) return '';
  return liquidSyntaxProblem(`{% if ${condition} %}{% endif %}`)?.message;
}

export function isStepType(type: unknown): type is StepType {
  return typeof type === 'string' && (STEP_TYPES as readonly string[]).includes(type);
}

export function newStepChecker(base: string, policy?: OutboundPolicy): StepChecker {
  return new StepChecker(base, policy);
}

/**
 * Why an http_request URL would be refused at every call: its host is a literal private,
 * loopback or reserved address the policy does not allow (any spelling the URL parser
 * reads as one, such as 2130706433 or [::ffff:127.0.0.1]). Undefined when it is not, when
 * Liquid makes up any of its origin (known only when the run renders it) or when it does
 * not parse yet; names are checked as they resolve, at each call.
 */
export function literalDestinationProblem(url: string, policy: OutboundPolicy): string | undefined {
  const scheme = url.indexOf('://');
  if (scheme === -1) return undefined;
  const rest = url.slice(scheme + 3);
  const end = rest.search(/[/?#]/);
  if ((end === -1 ? rest : rest.slice(0, end)).includes('{')) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return undefined;
  }
  return literalRefusal(parsed.hostname, portOf(parsed), policy);
}

/** Validates a workflow's step array; throws 422 listing every problem with its path. */
export function validateSteps(steps: unknown, base = '/steps', policy?: OutboundPolicy): StepDefinition[] {
  const errors: FieldError[] = [];
  if (!Array.isArray(steps)) throw new ValidationError('validation_failed', 'steps must be an array', [{ path: base, message: 'must be array' }]);
  if (steps.length > MAX_STEPS) errors.push({ path: base, message: `must have at most ${MAX_STEPS} steps` });
  steps.forEach((step, i) => {
    const check = new StepChecker(`${base}/${i}`, policy);
    if (!step || typeof step !== 'object' || Array.isArray(step)) {
      check.fail('', 'must be an object');
    } else {
      const { type, ...fields } = step as Fields;
      if (!isStepType(type)) check.fail('type', `must be one of ${STEP_TYPES.join(', ')}`);
      else checkStepFields(type, fields, check);
    }
    errors.push(...check.errors);
  });
  if (errors.length) throw new ValidationError('invalid_steps', 'Some steps are invalid', errors);
  return steps as StepDefinition[];
}

/** What a read-only role sees in place of a secret it may not read. */
export const MASKED = '••••';

/**
 * A step's fields as a read-only role (VIEWER) sees them: the values of an http_request's
 * headers (an `Authorization: Bearer …` for the API it calls) are masked, their names kept,
 * and so is its URL past the host (maskUrlPath) and its body (a token in a JSON body, as
 * some APIs take it); everything else is as stored. Those who may edit the step (MEMBER and
 * above) see it whole.
 */
export function maskStepSecrets<T extends Record<string, unknown>>(type: unknown, fields: T): T {
  if (type !== 'http_request') return fields;
  let out = fields;
  if (fields.headers && typeof fields.headers === 'object') out = { ...out, headers: maskHeaderValues(fields.headers as Record<string, unknown>) };
  if (fields.body !== undefined && fields.body !== null && fields.body !== '') out = { ...out, body: MASKED };
  if (typeof fields.url === 'string') {
    const url = maskUrlPath(fields.url);
    if (url !== fields.url) out = { ...out, url };
  }
  return out;
}

/**
 * A URL with its scheme and host kept and the rest masked: the path and query of a call out
 * often are its credential (a Slack or Discord webhook's path, `?token=`), and so is a
 * user and password before the host. The host ends where a URL parser ends it (`\` is a
 * `/` to it) or where Liquid starts, whose output is known only at the call. A URL that does
 * not start with a scheme and host (a Liquid template) is masked whole.
 */
export function maskUrlPath(url: string): string {
  const found = /^([a-z][a-z0-9+.-]*:\/\/)([^/\\?#{]*)/i.exec(url);
  if (!found) return url === '' ? url : MASKED;
  const [origin, scheme, authority] = found as unknown as [string, string, string];
  const at = authority.lastIndexOf('@');
  const shown = at === -1 ? origin : `${scheme}${MASKED}@${authority.slice(at + 1)}`;
  const rest = url.slice(origin.length);
  if (rest === '' || rest === '/') return at === -1 ? url : `${shown}${rest}`;
  return rest.startsWith('{') ? `${shown}${MASKED}` : `${shown}/${MASKED}`;
}

/** Headers with their names kept and their values masked. */
export function maskHeaderValues(headers: Record<string, unknown>): Record<string, string> {
  return Object.fromEntries(Object.keys(headers).map((name) => [name, MASKED]));
}
