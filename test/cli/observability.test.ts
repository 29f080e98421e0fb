/**
 * Operator comfort through the real `svc` (issue 10, items 4 and 6): log lines for people on
 * a terminal (or with SVC_LOG_FORMAT=pretty) and JSON otherwise, secrets redacted in both;
 * `svc --version` names the schema version; `svc serve --metrics-port` serves /metrics on
 * 127.0.0.1 only.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { freePort } from '../../src/cli/serve.js';
import { request } from '../helpers.js';
import { assertLoopbackOnly, parseMetrics } from '../prometheus.js';
import { CLI_COMMAND, cliEnv, KNOWN_MIGRATIONS, lines, REPO, runCli, runCliArgs, show, startServe, tempDir } from './helpers.js';

const SECRET_TOKEN = 'whk_this-is-a-secret-webhook-token-0123';

/** Requests whose log lines could carry secrets: a webhook URL (a credential) and a bearer token. */
async function sendSecrets(url: string): Promise<void> {
  await request(url, 'POST', `/v1/webhooks/in/${SECRET_TOKEN}`, { body: { email: 'a@example.com' } });
  await request(url, 'GET', '/contacts', { token: 'svc_live_secret-bearer-value-0123456789' });
  await request(url, 'POST', '/auth/login', { body: { email: 'owner@example.com', password: 'secret-password-0123' } });
  // Credentials a client put in the query string by mistake: by their names, or an API key under any name.
  await request(url, 'GET', '/contacts?limit=5&access_token=secret-query-token&api_key=secret-query-key&q=svc_live_secret-query-any&password=secret-query-pw');
}

async function waitFor(read: () => string, re: RegExp, ms = 20_000): Promise<void> {
  const until = Date.now() + ms;
  while (!re.test(read())) {
    if (Date.now() > until) assert.fail(`no ${re} within ${ms} ms in:\n${read()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function assertNoSecrets(text: string): void {
  for (const secret of [SECRET_TOKEN, 'secret-bearer-value', 'secret-password', 'secret-query'])
    assert.ok(!text.includes(secret), `"${secret}" is not logged:\n${text}`);
}

test('logs are JSON lines when stdout is not a terminal (the default), secrets redacted', async (t) => {
  const dir = tempDir(t);
  const server = await startServe(t, dir);
  await sendSecrets(server.url);
  await waitFor(server.stdout, /request completed[\s\S]*request completed[\s\S]*request completed/);
  await server.stop();
  const logs = lines(server.stdout()).filter((l) => l.startsWith('{'));
  assert.ok(logs.length >= 6, server.stdout());
  for (const line of logs) {
    const entry = JSON.parse(line);
    assert.equal(typeof entry.level, 'number');
    assert.equal(typeof entry.msg, 'string');
  }
  assert.ok(
    logs.some((l) => l.includes('/v1/webhooks/in/[redacted]')),
    server.stdout(),
  );
  assert.ok(
    logs.some((l) => l.includes('/contacts?limit=5&access_token=[redacted]&api_key=[redacted]&q=[redacted]&password=[redacted]')),
    server.stdout(),
  );
  // Each request's lines carry its id (the request's logger is made on its first line).
  const requestLines = logs.map((l) => JSON.parse(l)).filter((e) => /^(incoming request|request completed)$/.test(e.msg));
  assert.ok(requestLines.length >= 6, server.stdout());
  for (const entry of requestLines) assert.match(String(entry.reqId), /^[0-9a-f-]{36}$/, JSON.stringify(entry));
  assertNoSecrets(server.stdout() + server.stderr());
});

test('SVC_LOG_FORMAT=pretty: human-readable lines even on a pipe, secrets still redacted', async (t) => {
  const dir = tempDir(t);
  const server = await startServe(t, dir, ['--port', '0'], { env: { SVC_LOG_FORMAT: 'pretty' } });
  await sendSecrets(server.url);
  await waitFor(server.stdout, /request completed[\s\S]*request completed[\s\S]*request completed/);
  await server.stop();
  const out = server.stdout();
  assert.match(out, /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: incoming request$/m);
  assert.match(out, /"url": "\/v1\/webhooks\/in\/\[redacted\]"/);
  // No colour codes on a pipe, and no JSON log lines.
  assert.ok(!out.includes('\u001b['), 'no ANSI colours when stdout is a pipe');
  assert.ok(!lines(out).some((l) => l.startsWith('{"level"')), out);
  assertNoSecrets(out + server.stderr());
});

test('on a terminal (auto), logs are pretty and coloured', async (t) => {
  const dir = tempDir(t);
  // script(1) gives the server a pseudo-terminal as stdout.
  const tsx = import.meta.resolve('tsx');
  const command = [process.execPath, '--import', tsx, join(REPO, 'src', 'cli', 'entry.ts'), '--data-dir', dir, 'serve', '--port', '0']
    .map((a) => `'${a}'`)
    .join(' ');
  const child = spawn('script', ['-q', '-e', '-c', command, '/dev/null'], { env: cliEnv(), detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  t.after(() => {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // already gone
    }
  });
  await waitFor(() => out, /svc listening on (http:\/\/\S+)/, 60_000);
  const url = /svc listening on (http:\/\/[^\s)]+)/.exec(out)![1]!;
  await sendSecrets(url);
  await waitFor(() => out, /request completed[\s\S]*request completed[\s\S]*request completed/);
  process.kill(-child.pid!, 'SIGTERM');
  const ESC = String.fromCharCode(27);
  assert.ok(out.includes(`] ${ESC}[32mINFO${ESC}[39m: `), `coloured level names:\n${out.slice(0, 2000)}`);
  assert.match(out, /^\[\d\d:\d\d:\d\d\.\d{3}\] /m);
  assertNoSecrets(out);
});

test('SVC_LOG_FORMAT must be auto, pretty or json', async (t) => {
  const dir = tempDir(t);
  assert.equal((await runCli(dir, ['init', '--yes', '--json'])).code, 0);
  const r = await runCli(dir, ['serve', '--port', '0'], { env: { SVC_LOG_FORMAT: 'xml' } });
  assert.equal(r.code, 1, show(r));
  assert.match(r.stderr, /logFormat must be one of auto, pretty, json/);
});

test('svc --version names the version and the schema version it carries', async () => {
  const r = await runCliArgs(['--version']);
  assert.equal(r.code, 0, show(r));
  // From source the version is `dev`; the bundle carries package.json's (see CLI_COMMAND).
  const version = CLI_COMMAND.length === 1 ? (JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string }).version : 'dev';
  assert.equal(r.stdout.trim(), `${version} (schema ${KNOWN_MIGRATIONS.at(-1)})`);
});

test('svc serve --metrics-port: /metrics on 127.0.0.1 without a token; not on the public port, not on other addresses', async (t) => {
  const dir = tempDir(t);
  const port = await freePort('127.0.0.1');
  const server = await startServe(t, dir, ['--port', '0', '--host', '0.0.0.0', '--metrics-port', String(port)]);
  const res = await request(`http://127.0.0.1:${port}`, 'GET', '/metrics');
  assert.equal(res.status, 200, res.text.slice(0, 200));
  assert.ok(parseMetrics(res.text).has('svc_runs_queue_depth'));
  // The public port listens on every address, but has no metrics without a token.
  assert.equal((await request(server.url.replace('0.0.0.0', '127.0.0.1').replace('localhost', '127.0.0.1'), 'GET', '/metrics')).status, 404);
  await assertLoopbackOnly(port);
  const stopped = await server.stop();
  assert.equal(stopped.code, 0);
  // The listener closed with the server.
  await assert.rejects(fetch(`http://127.0.0.1:${port}/metrics`));
});
