/**
 * The console's API types (src/console/api/schema.d.ts) are generated from the server's
 * OpenAPI document; this fails when a route changed and `npm run console:types` was not run.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { SCHEMA_TYPES_FILE, schemaTypes } from './apiTypes.js';

test('the committed API types are what the OpenAPI document describes (run `npm run console:types` if not)', async () => {
  const committed = readFileSync(SCHEMA_TYPES_FILE, 'utf8');
  const generated = await schemaTypes();
  assert.ok(generated.includes('"/contacts": {') && generated.includes('"/auth/me": {'));
  if (committed === generated) return;
  const [a, b] = [committed.split('\n'), generated.split('\n')];
  const line = a.findIndex((text, i) => text !== b[i]);
  assert.fail(
    `src/console/api/schema.d.ts is out of date: run \`npm run console:types\` (line ${line + 1}: committed ${JSON.stringify(a[line])}, generated ${JSON.stringify(b[line])})`,
  );
});
