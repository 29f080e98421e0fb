import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { runCli, tempDir, type ServeProcess } from '../cli/helpers.js';
import { request } from '../helpers.js';

/** The OWNER of the folders the end-to-end tests initialise. */
export const OPS = { email: 'ops@example.com', password: 'ops-password-1' };

/** A data folder initialised by `svc init` (PRO plan, OPS as its owner), removed after the test. */
export async function initFolder(t: TestContext, prefix: string): Promise<string> {
  const dataDir = tempDir(t, prefix);
  const init = await runCli(dataDir, ['init', '--yes', '--plan', 'PRO', '--email', OPS.email, '--password-stdin'], { stdin: OPS.password });
  assert.equal(init.code, 0, init.stderr);
  return dataDir;
}

/** An access token of OPS from a running `svc serve`. */
export async function login(server: ServeProcess): Promise<string> {
  const res = await request(server.url, 'POST', '/auth/login', { body: OPS });
  assert.equal(res.status, 200, res.text);
  return res.body.token;
}
