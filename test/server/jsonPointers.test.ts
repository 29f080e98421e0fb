/**
 * The JSON Pointers of what the API refuses inside a parsed body or an import's row: U+0000
 * in a string or a key (nulPointer), a `__proto__` key or a `constructor` holding `prototype`
 * (prototypeKeyPointer). They are written only when found; these tests hold them to the
 * pointer a plain walk writing every one would give, on given and on random values.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { nulPointer, prototypeKeyPointer } from '../../src/core/validation.js';

const escapeKey = (key: string) => key.replace(/~/g, '~0').replace(/\//g, '~1');

/** A plain walk (the same order: depth first, last pushed first) writing every place's pointer. */
function nulReference(value: unknown): string | undefined {
  const stack: [unknown, string][] = [[value, '']];
  while (stack.length) {
    const [item, at] = stack.pop()!;
    if (typeof item === 'string') {
      if (item.includes('\u0000')) return at || '/';
      continue;
    }
    if (item === null || typeof item !== 'object') continue;
    for (const [key, child] of Object.entries(item)) {
      const here = `${at}/${escapeKey(key)}`;
      if (key.includes('\u0000')) return here;
      stack.push([child, here]);
    }
  }
  return undefined;
}

function prototypeReference(value: unknown): string | undefined {
  const stack: [unknown, string][] = [[value, '']];
  while (stack.length) {
    const [item, at] = stack.pop()!;
    if (item === null || typeof item !== 'object') continue;
    for (const [key, child] of Object.entries(item)) {
      const here = `${at}/${escapeKey(key)}`;
      if (key === '__proto__') return here;
      if (key === 'constructor' && child !== null && typeof child === 'object' && Object.hasOwn(child, 'prototype')) return `${here}/prototype`;
      stack.push([child, here]);
    }
  }
  return undefined;
}

test('pointers to U+0000 and to prototype keys: escaped keys, arrays, the value itself, nothing found', () => {
  assert.equal(nulPointer('a\u0000b'), '/');
  assert.equal(nulPointer('plain'), undefined);
  assert.equal(nulPointer({ a: [1, { 'x/y~z': 'n\u0000' }] }), '/a/1/x~1y~0z');
  assert.equal(nulPointer({ a: { 'k\u0000': 1 } }), '/a/k\u0000');
  assert.equal(nulPointer({ a: 1, b: [true, null, 2.5, 'ok'], c: { d: {} } }), undefined);
  // A key is checked as its object is read, a string value when the walk reaches it.
  assert.equal(nulPointer({ a: 'v\u0000', 'b\u0000': 1 }), '/b\u0000');
  const parsed = JSON.parse('{"x":{"y":[{"__proto__":{"p":1}}]}}');
  assert.equal(prototypeKeyPointer(parsed), '/x/y/0/__proto__');
  assert.equal(prototypeKeyPointer(JSON.parse('{"a/b":{"constructor":{"prototype":{}}}}')), '/a~1b/constructor/prototype');
  assert.equal(prototypeKeyPointer({ constructor: 'a string', a: { constructor: {} } }), undefined);
  assert.equal(prototypeKeyPointer('__proto__'), undefined);
});

test('on 3,000 random values the pointers are those of a walk writing every one', () => {
  let seed = 12345;
  const random = () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed / 0x7fffffff;
  };
  const pick = <T>(xs: T[]): T => xs[Math.floor(random() * xs.length)]!;
  const keys = ['a', 'b', 'x/y', 'm~n', '~/', '', 'k\u0000', 'constructor', 'prototype', '__proto__', 'é'];
  const strings = ['', 'plain', 'n\u0000', '\u0000', 'über', '~1'];
  const make = (depth: number): unknown => {
    const r = random();
    if (depth > 4 || r < 0.3) return pick<unknown>([...strings, 1, 0, true, null, 2.5]);
    if (r < 0.5) return Array.from({ length: Math.floor(random() * 4) }, () => make(depth + 1));
    // Built as JSON text and parsed, as bodies and rows are: `__proto__` is then an own key.
    const n = Math.floor(random() * 4);
    const members = Array.from({ length: n }, () => `${JSON.stringify(pick(keys))}:${JSON.stringify(make(depth + 1)) ?? 'null'}`);
    return JSON.parse(`{${members.join(',')}}`);
  };
  let found = 0;
  for (let i = 0; i < 3000; i++) {
    const value = make(0);
    assert.equal(nulPointer(value), nulReference(value), JSON.stringify(value));
    assert.equal(prototypeKeyPointer(value), prototypeReference(value), JSON.stringify(value));
    if (nulPointer(value) !== undefined || prototypeKeyPointer(value) !== undefined) found++;
  }
  // Both outcomes were exercised.
  assert.ok(found > 300 && found < 2700, `${found} of 3000 had something to point at`);
});

test('a value nested 100,000 deep is walked without the stack, and its pointer written whole', () => {
  const depth = 100_000;
  const nested = JSON.parse(`${'['.repeat(depth)}"x\\u0000"${']'.repeat(depth)}`);
  assert.equal(nulPointer(nested), '/0'.repeat(depth));
  const objects = JSON.parse(`${'{"a/b":'.repeat(depth)}{"__proto__":1}${'}'.repeat(depth)}`);
  assert.equal(prototypeKeyPointer(objects), `${'/a~1b'.repeat(depth)}/__proto__`);
});
