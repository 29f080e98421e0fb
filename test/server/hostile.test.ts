/**
 * Every operation the OpenAPI document lists, fed hostile input through the real server: path
 * ids that are junk or another's, query values of every odd kind, bodies built from the
 * operation's own schema with wrong types, huge, nested, NUL and surrogate strings slipped in,
 * bodies that are not JSON at all, wrong content types and encodings. Whatever comes in, the
 * answer is never a 5xx and never a dropped connection, and every refusal is an RFC 9457
 * problem whose status is the HTTP status. Seeded, so a failure repeats.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { build, seededRandom, webhookWorkflow } from '../helpers.js';

const PER_OPERATION = 12;

type Schema = {
  $ref?: string;
  anyOf?: Schema[];
  oneOf?: Schema[];
  enum?: unknown[];
  type?: string | string[];
  properties?: Record<string, Schema>;
  items?: Schema;
};
type Operation = { parameters?: { in: string; name: string; schema?: Schema }[]; requestBody?: { content?: Record<string, { schema?: Schema }> } };

const ODD_STRINGS = [
  '',
  ' ',
  '0',
  '-1',
  '1e999',
  '99999999999999999999999',
  'null',
  'true',
  '\u0000',
  '%00',
  '../../etc/passwd',
  "' OR 1=1 --",
  '"',
  '\\',
  '\ud800',
  '𝕏𝕏𝕏',
  'a'.repeat(5000),
  '[]',
  '{}',
  'NaN',
  '2026-13-45',
  '__proto__',
  'constructor',
  'x@y',
  '+15551234567',
  '*',
  '%',
  '_',
];
/** A lone surrogate cannot be percent-encoded into a URL (the body keeps them). */
const wellFormed = (text: string): string => text.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd');

const ODD_NUMBERS = [0, -1, 1.5, 2 ** 53, -(2 ** 63), 1e308];

test('no operation answers hostile input with a 5xx or a dropped connection; every refusal is a problem', async (t) => {
  const s = await build(t, { plan: 'PRO' });
  let token = await s.login(s.owner.email, s.owner.password);
  const contact = await s.request('POST', '/contacts', { token, body: { email: 'a@example.test', tags: ['vip'] } });
  assert.equal(contact.status, 201, contact.text);
  await webhookWorkflow(s, token, 'W', [{ type: 'add_tags', tags: ['x'] }]);
  const doc = (await s.request('GET', '/openapi.json')).body as {
    paths: Record<string, Record<string, Operation>>;
    components?: { schemas?: Record<string, Schema> };
  };

  const random = seededRandom(20261127);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const odd = (): unknown => {
    const r = random();
    if (r < 0.5) return pick(ODD_STRINGS);
    if (r < 0.7) return pick(ODD_NUMBERS);
    if (r < 0.8) return pick([null, true, false]);
    if (r < 0.9) return [pick(ODD_STRINGS), pick(ODD_NUMBERS)];
    return { [pick(ODD_STRINGS)]: pick(ODD_STRINGS) };
  };
  const fromSchema = (schema: Schema | undefined, depth = 0): unknown => {
    if (!schema || depth > 4 || random() < 0.15) return odd();
    if (schema.$ref) return fromSchema(doc.components?.schemas?.[schema.$ref.split('/').pop()!], depth + 1);
    if (schema.anyOf || schema.oneOf) return fromSchema(pick((schema.anyOf ?? schema.oneOf)!), depth + 1);
    if (schema.enum) return random() < 0.8 ? pick(schema.enum) : odd();
    switch (Array.isArray(schema.type) ? schema.type[0] : schema.type) {
      case 'object': {
        const out: Record<string, unknown> = {};
        for (const [key, value] of Object.entries(schema.properties ?? {})) if (random() < 0.7) out[key] = fromSchema(value, depth + 1);
        if (random() < 0.1) out[pick(ODD_STRINGS)] = odd();
        return out;
      }
      case 'array':
        return Array.from({ length: Math.floor(random() * 4) }, () => fromSchema(schema.items, depth + 1));
      case 'string':
        return random() < 0.5 ? pick(['a@example.test', 'hello', '2026-01-01T00:00:00Z', 'https://example.com', '+14155550100']) : pick(ODD_STRINGS);
      case 'integer':
      case 'number':
        return random() < 0.6 ? pick([1, 2, 10, 100]) : pick(ODD_NUMBERS);
      default:
        return odd();
    }
  };
  const segment = (value: unknown): string => encodeURIComponent(wellFormed(String(value)));

  const failures: string[] = [];
  let requests = 0;
  let refreshed = 0;
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (!['get', 'post', 'put', 'patch', 'delete'].includes(method)) continue;
      for (let i = 0; i < PER_OPERATION; i++) {
        const url = path.replace(/\{[^}]+\}/g, () => segment(random() < 0.5 ? pick([1, 2, 999_999]) : odd()));
        const query = new URLSearchParams();
        for (const p of op.parameters ?? [])
          if (p.in === 'query' && random() < 0.6) query.append(p.name, wellFormed(String(random() < 0.5 ? fromSchema(p.schema) : odd())));
        if (random() < 0.1) query.append(wellFormed(pick(ODD_STRINGS)), wellFormed(pick(ODD_STRINGS)));
        const headers: Record<string, string> = {};
        let raw: string | undefined;
        if (method !== 'get' && method !== 'delete') {
          const r = random();
          headers['content-type'] = 'application/json';
          if (r < 0.7) raw = JSON.stringify(fromSchema(op.requestBody?.content?.['application/json']?.schema));
          else if (r < 0.8) raw = pick(['{', '[]', 'null', '"x"', '1', `{"a":${'['.repeat(5000)}}`, '\u0000', '']);
          else if (r < 0.9) {
            headers['content-type'] = pick(['text/csv', 'application/x-ndjson', 'text/plain', 'application/xml', 'multipart/form-data']);
            raw = pick(['email\na@b.c\n', '{"email":"x"}\n{', '"a,b\n', '\ufeffemail,tags\n"x@y.z","a;b"\n', 'x'.repeat(10_000)]);
          } else raw = JSON.stringify(odd());
        }
        if (random() < 0.05) headers['content-encoding'] = pick(['gzip', 'br', 'identity', 'x']);
        if (random() < 0.05)
          headers['idempotency-key'] =
            pick(ODD_STRINGS)
              .replace(/[^\x20-\x7e]/g, 'x')
              .slice(0, 300) || 'k';
        const withToken = random() < 0.9;
        const target = `${url}${query.size ? `?${query}` : ''}`;
        requests++;
        let res: Awaited<ReturnType<typeof s.request>>;
        try {
          res = await s.request(method.toUpperCase(), target, { token: withToken ? token : undefined, headers, raw });
        } catch (err) {
          failures.push(
            `${method.toUpperCase()} ${target.slice(0, 160)}: ${(err as Error & { cause?: { code?: string } }).cause?.code ?? (err as Error).message}`,
          );
          continue;
        }
        const what = `${method.toUpperCase()} ${target.slice(0, 160)} ${raw === undefined ? '' : `body ${raw.slice(0, 120)}`} -> ${res.status} ${res.text.slice(0, 200)}`;
        if (res.status >= 500) failures.push(what);
        else if (res.status >= 400 && res.status !== 405) {
          const type = res.headers.get('content-type') ?? '';
          if (!type.startsWith('application/problem+json') || res.body?.status !== res.status || typeof res.body?.code !== 'string')
            failures.push(`not a problem: ${what}`);
        }
        // A request may have ended the session (logout, a password change, a revoked key): go on with a fresh one.
        if (res.status === 401 && withToken) {
          refreshed++;
          token = await s.mintKey('ADMIN');
        }
      }
    }
  }
  assert.deepEqual(failures, [], `${failures.length} of ${requests} requests`);
  assert.ok(requests > 600, `${requests} requests`);
  assert.ok(refreshed < requests / 4, `credentials refreshed ${refreshed} times`);
  // And the server still serves.
  assert.equal((await s.request('GET', '/healthz')).status, 200);
  assert.equal((await s.request('GET', '/contacts', { token: await s.mintKey('ADMIN') })).status, 200);
});
