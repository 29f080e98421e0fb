import { parsePhoneNumberFromString, type CountryCode } from 'libphonenumber-js';
import { escapePointerKey } from './jsonPath.js';

const EMAIL_RE = /^[^\s@"<>()[\]\\,;:]{1,64}@(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$/;
/** Control characters: U+0000 is refused by PostgreSQL, so such an address could be neither stored nor looked up, and none is deliverable. */
const CONTROL_RE = /\p{Cc}/u;

/** Lower-cased and trimmed, or undefined when it does not look like an address. */
export function normalizeEmail(value: string): string | undefined {
  const email = value.trim().toLowerCase();
  return email.length <= 254 && EMAIL_RE.test(email) && !CONTROL_RE.test(email) && wellFormed(email) ? email : undefined;
}

/**
 * Whether a string is well-formed Unicode: no lone surrogate (`"\ud800"` in JSON), which no
 * store keeps as sent (SQLite and PostgreSQL write U+FFFD in its place).
 */
export function wellFormed(text: string): boolean {
  return (text as string & { isWellFormed(): boolean }).isWellFormed();
}

/** E.164, or undefined when the number is not valid for its (or the default) region. */
export function normalizePhone(value: string, defaultRegion: string): string | undefined {
  if (value.length > 64) return undefined;
  const parsed = parsePhoneNumberFromString(value.trim(), defaultRegion as CountryCode);
  return parsed?.isValid() ? parsed.number : undefined;
}

export const PASSWORD_MIN = 8;
export const PASSWORD_MAX = 1024;

export function passwordProblem(password: string): string | undefined {
  if (password.length < PASSWORD_MIN) return `must be at least ${PASSWORD_MIN} characters`;
  if (password.length > PASSWORD_MAX) return `must be at most ${PASSWORD_MAX} characters`;
  // Spaces count (a passphrase has them), but a password of nothing else is no secret.
  if (password.trim() === '') return 'must not be only spaces';
  // What no login could send (a JSON body with U+0000 or a lone surrogate is refused), set
  // from standard input by the CLI, would lock the account out.
  if (password.includes('\u0000')) return 'must not contain U+0000';
  if (!wellFormed(password)) return 'must be well-formed Unicode (no lone surrogate)';
  return undefined;
}

/**
 * True when a JSON value nests deeper than `max` levels. Iterative, so a hostile body
 * cannot overflow the stack here (JSON.stringify would, on thousands of levels).
 */
export function jsonDepthExceeds(value: unknown, max: number): boolean {
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length) {
    const [current, depth] = stack.pop()!;
    if (current === null || typeof current !== 'object') continue;
    if (depth >= max) return true;
    for (const child of Object.values(current)) if (child !== null && typeof child === 'object') stack.push([child, depth + 1]);
  }
  return false;
}

export const MAX_JSON_DEPTH = 32;

/** Where a parsed JSON value holds text no store keeps as sent, and what is wrong with it. */
export interface UnstorableText {
  at: string;
  message: string;
}

const NUL_MESSAGE = 'must not contain U+0000';
const SURROGATE_MESSAGE = 'must be well-formed Unicode (a lone surrogate such as \\ud800 is not a character)';

/**
 * The first string (or object key) in a parsed JSON value that holds U+0000 or a lone
 * surrogate, or undefined. No store keeps them as sent (PostgreSQL's text and jsonb refuse
 * U+0000; both stores write a lone surrogate as U+FFFD), so the API refuses them on both
 * stores alike rather than store something else than it was sent.
 */
export function unstorableText(value: unknown): UnstorableText | undefined {
  return firstText(value, textProblem);
}

function textProblem(text: string): string | undefined {
  if (text.includes('\u0000')) return NUL_MESSAGE;
  return wellFormed(text) ? undefined : SURROGATE_MESSAGE;
}

/**
 * The JSON Pointer of the first string (or object key) in a parsed JSON value that holds
 * U+0000, or undefined (a URL's parameters: they cannot hold a lone surrogate).
 */
export function nulPointer(value: unknown): string | undefined {
  return firstText(value, (text) => (text.includes('\u0000') ? NUL_MESSAGE : undefined))?.at;
}

/** The first string or object key of a parsed JSON value with a problem, where it is and what. */
function firstText(value: unknown, problemOf: (text: string) => string | undefined): UnstorableText | undefined {
  // Iterative: a body may nest deeper than the stack (depth limits come later, per field).
  const items: unknown[] = [value];
  const places: (Place | null)[] = [null];
  while (items.length) {
    const item = items.pop();
    const at = places.pop() as Place | null;
    if (typeof item === 'string') {
      const message = problemOf(item);
      if (message) return { at: pointerTo(at) || '/', message };
      continue;
    }
    if (item === null || typeof item !== 'object') continue;
    for (const [key, child] of Object.entries(item)) {
      const message = problemOf(key);
      if (message) return { at: pointerTo({ key, parent: at }), message };
      if (typeof child === 'string' || (child !== null && typeof child === 'object')) {
        items.push(child);
        places.push({ key, parent: at });
      }
    }
  }
  return undefined;
}

/**
 * Where a walk of a parsed JSON value is: the key that led there and the place that key is
 * in (null: the value itself). Its JSON Pointer is written only when the walk stops there:
 * every row of an import and every API body is walked, and almost none stop.
 */
interface Place {
  key: string;
  parent: Place | null;
}

/** The JSON Pointer of a place ('' for the value itself), its keys escaped (RFC 6901). */
function pointerTo(place: Place | null): string {
  let out = '';
  for (let p = place; p; p = p.parent) out = `/${escapePointerKey(p.key)}${out}`;
  return out;
}

/**
 * The JSON Pointer of the first query parameter whose percent-encoding is malformed (a `%`
 * not followed by two hex digits) or does not decode to UTF-8, or undefined. Fastify's query
 * parser decodes such a value leniently, so a filter on it would quietly match nothing; the
 * API answers 400 instead, as it does for a path it cannot decode.
 */
export function undecodableQueryPointer(query: string): string | undefined {
  if (!query.includes('%')) return undefined;
  for (const pair of query.split('&')) {
    if (!pair.includes('%')) continue;
    const eq = pair.indexOf('=');
    const rawName = eq === -1 ? pair : pair.slice(0, eq);
    const name = decodeOrUndefined(rawName.replace(/\+/g, ' '));
    if (name === undefined || decodeOrUndefined(pair.slice(eq + 1).replace(/\+/g, ' ')) === undefined) return `/${escapePointerKey(name ?? rawName)}`;
  }
  return undefined;
}

function decodeOrUndefined(text: string): string | undefined {
  try {
    return decodeURIComponent(text);
  } catch {
    return undefined;
  }
}

/**
 * The JSON Pointer of the first key the API's JSON parser refuses (Fastify's: a `__proto__`
 * key, or a `constructor` key holding a `prototype` key, at any depth), or undefined. For
 * input parsed elsewhere (an import's rows), so that it is held to the same rule.
 */
export function prototypeKeyPointer(value: unknown): string | undefined {
  const items: unknown[] = [value];
  const places: (Place | null)[] = [null];
  while (items.length) {
    const item = items.pop();
    const at = places.pop() as Place | null;
    if (item === null || typeof item !== 'object') continue;
    for (const [key, child] of Object.entries(item)) {
      if (key === '__proto__') return pointerTo({ key, parent: at });
      const isObject = child !== null && typeof child === 'object';
      if (key === 'constructor' && isObject && Object.hasOwn(child, 'prototype')) return `${pointerTo({ key, parent: at })}/prototype`;
      if (isObject) {
        items.push(child);
        places.push({ key, parent: at });
      }
    }
  }
  return undefined;
}

/**
 * The most tags one contact may have. Every list page, export and run of a contact reads all
 * of its tags: without a bound, a contact given a million of them (100 per request) would
 * make each of those cost a million rows.
 */
export const MAX_TAGS_PER_CONTACT = 1000;

/** A contact's attributes, as JSON, at most: on every path that writes them (the API, imports, update_contact steps). */
export const ATTRIBUTES_MAX_BYTES = 64 * 1024;
/** Why a write that would take a contact past MAX_TAGS_PER_CONTACT is refused. */
export const TOO_MANY_TAGS = `a contact has at most ${MAX_TAGS_PER_CONTACT} tags`;
