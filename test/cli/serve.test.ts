import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import Database from 'better-sqlite3';
import { request } from '../helpers.js';
import { lines, runCli, runServeExpectingFailure, show, startServe, tempDir } from './helpers.js';

const DEFAULT_OWNER = 'admin@svc.local';

async function login(url: string, email: string, password: string) {
  return request(url, 'POST', '/auth/login', { body: { email, password } });
}

/** Polls until fn() is true or the deadline passes; returns the time it became true (or undefined). */
async function pollUntil(fn: () => Promise<boolean>, deadline: number, intervalMs = 200): Promise<number | undefined> {
  for (;;) {
    if (await fn()) return Date.now();
    if (Date.now() > deadline) return undefined;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

describe('svc serve', { concurrency: true }, () => {
  test('on an empty data folder: auto-initialises, prints the owner password and a login hint, serves, stops on SIGTERM', async (t) => {
    const dataDir = join(tempDir(t), 'fresh');
    const server = await startServe(t, dataDir);
    const out = server.stdout();
    assert.match(out, /Initiali[sz]ed/);
    assert.ok(out.includes(DEFAULT_OWNER), out);
    assert.match(out, /\/auth\/login/, 'a login hint');
    const m = /password\s+(\S+)\s+<- shown once/.exec(out);
    assert.ok(m, `the generated password is printed:\n${out}`);
    const password = m[1]!;
    const everything = server.stdout() + server.stderr();
    assert.equal(everything.split(password).length - 1, 1, 'the password is printed once and never logged');

    const health = await request(server.url, 'GET', '/healthz');
    assert.equal(health.status, 200);
    assert.equal(health.body.status, 'ok');
    assert.equal(typeof health.body.schemaVersion, 'string');

    const ok = await login(server.url, DEFAULT_OWNER, password);
    assert.equal(ok.status, 200, ok.text);
    assert.equal(typeof ok.body.token, 'string');
    assert.equal(ok.body.user.email, DEFAULT_OWNER);
    assert.equal(ok.body.user.isSuperAdmin, true, 'the first owner is super-admin');
    assert.equal(ok.body.workspace.role, 'OWNER');
    assert.equal(ok.body.workspace.plan, 'STARTER');

    const wrong = await login(server.url, DEFAULT_OWNER, `${password}x`);
    assert.equal(wrong.status, 401);

    const stopped = await server.stop('SIGTERM', 10_000);
    assert.equal(stopped.signal, null, `exited by itself, not killed: ${JSON.stringify(stopped)}`);
    assert.equal(stopped.code, 0, `exit code 0 after SIGTERM\n${server.stderr()}`);

    // A second start on the now-initialised folder does not initialise again.
    const again = await startServe(t, dataDir);
    assert.doesNotMatch(again.stdout(), /Initiali[sz]ed|shown once/);
    const relogin = await login(again.url, DEFAULT_OWNER, password);
    assert.equal(relogin.status, 200, relogin.text);
    const stoppedAgain = await again.stop('SIGTERM', 10_000);
    assert.equal(stoppedAgain.code, 0);
  });

  test('the password from init --password-stdin logs in; svc user passwd changes it under a running server', async (t) => {
    const dataDir = join(tempDir(t), 'data');
    const init = await runCli(dataDir, ['init', '--yes', '--email', 'boss@example.com', '--password-stdin', '--json'], { stdin: 'first-password-1\n' });
    assert.equal(init.code, 0, show(init));
    const server = await startServe(t, dataDir);
    assert.doesNotMatch(server.stdout(), /shown once/, 'an initialised folder is not initialised again');

    const first = await login(server.url, 'boss@example.com', 'first-password-1');
    assert.equal(first.status, 200, first.text);
    assert.equal(first.body.workspace.id, init.json().workspace.id);

    const passwd = await runCli(dataDir, ['user', 'passwd', 'boss@example.com', '--password-stdin', '--json'], { stdin: 'second-password-2\n' });
    assert.equal(passwd.code, 0, show(passwd));
    assert.equal((await login(server.url, 'boss@example.com', 'second-password-2')).status, 200);
    assert.equal((await login(server.url, 'boss@example.com', 'first-password-1')).status, 401);

    const stopped = await server.stop('SIGTERM', 10_000);
    assert.equal(stopped.code, 0);
  });

  test('serve refuses a database migrated by a newer svc, with a clear message and a non-zero exit', async (t) => {
    const dataDir = join(tempDir(t), 'data');
    const init = await runCli(dataDir, ['init', '--yes', '--json']);
    assert.equal(init.code, 0, show(init));
    const db = new Database(join(dataDir, 'svc.db'));
    db.prepare('INSERT INTO svc_migrations (tag, applied_at) VALUES (?, ?)').run('9999_from_the_future', new Date().toISOString());
    db.close();

    const r = await runServeExpectingFailure(dataDir);
    assert.notEqual(r.code, 0, show(r));
    assert.doesNotMatch(r.stdout, /svc listening/, show(r));
    assert.match(r.stderr, /newer/i, show(r));
    assert.match(r.stderr, /9999_from_the_future/, show(r));
    assert.equal(lines(r.stderr).length, 1, show(r));
  });

  test('serve refuses SVC_TRUST_PROXY=true (trust every hop) at start-up, naming the forms it takes', async (t) => {
    const dataDir = join(tempDir(t), 'data');
    const init = await runCli(dataDir, ['init', '--yes', '--json']);
    assert.equal(init.code, 0, show(init));
    for (const value of ['true', 'banana']) {
      const r = await runCli(dataDir, ['serve', '--port', '0'], { env: { SVC_TRUST_PROXY: value } });
      assert.notEqual(r.code, 0, show(r));
      assert.doesNotMatch(r.stdout, /svc listening/, show(r));
      assert.equal(lines(r.stderr).length, 1, show(r));
      assert.match(r.stderr, /trustProxy/, show(r));
      assert.match(r.stderr, /hop count such as 1/, show(r));
      assert.match(r.stderr, /10\.0\.0\.0\/8,127\.0\.0\.1/, show(r));
    }
  });

  test('a port already in use ends serve at once with one line naming it, the data folder released; --port 0 names the port it serves on', async (t) => {
    const dataDir = join(tempDir(t), 'data');
    assert.equal((await runCli(dataDir, ['init', '--yes', '--json'])).code, 0);
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    t.after(() => holder.close());
    const taken = (holder.address() as AddressInfo).port;

    for (const args of [
      ['--port', String(taken)],
      ['--port', '0', '--metrics-port', String(taken)],
    ]) {
      const started = Date.now();
      const r = await runCli(dataDir, ['serve', ...args]);
      assert.equal(r.code, 1, show(r));
      // A guard against hanging (the bug this tests), not a timing: a loaded two-core machine starts Node slowly.
      assert.ok(Date.now() - started < 60_000, `exited after ${Date.now() - started} ms`);
      assert.doesNotMatch(r.stdout, /svc listening/, show(r));
      const errors = lines(r.stderr).filter((l) => l.startsWith('error:'));
      assert.equal(errors.length, 1, show(r));
      assert.match(errors[0]!, new RegExp(`127\\.0\\.0\\.1:${taken} is already in use`), show(r));
      assert.match(errors[0]!, args[2] ? /--metrics-port/ : /--port/, show(r));
      // Its pid file is gone: nothing holds the folder.
      assert.deepEqual(
        readdirSync(join(dataDir, 'locks')).filter((f) => f.startsWith('serve-')),
        [],
        show(r),
      );
    }

    // With --port 0 the port is chosen before start-up (the public URL names it) and held
    // until the server listens there.
    const serve = await startServe(t, dataDir, ['--port', '0']);
    assert.match(serve.stdout(), new RegExp(`svc listening on ${serve.url} \\(public URL ${serve.url},`), serve.stdout());
    assert.equal((await fetch(`${serve.url}/healthz`)).status, 200);
    await serve.stop();
  });

  test('serve --json on an empty folder whose port is taken: the generated owner password is not lost (stderr names it)', async (t) => {
    const dataDir = join(tempDir(t), 'data');
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    t.after(() => holder.close());
    const taken = (holder.address() as AddressInfo).port;
    const r = await runCli(dataDir, ['serve', '--json', '--port', String(taken)]);
    assert.equal(r.code, 1, show(r));
    assert.equal(r.stdout, '', 'nothing on stdout: --json prints only once serving');
    const told = /its owner is (\S+) with the password (\S+) \(shown only now/.exec(r.stderr);
    assert.ok(told, show(r));
    assert.match(r.stderr, new RegExp(`error: 127\\.0\\.0\\.1:${taken} is already in use`), show(r));
    // The password told is the owner's: a server on another port lets them in with it.
    const serve = await startServe(t, dataDir, ['--port', '0']);
    const login = await fetch(`${serve.url}/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: told[1], password: told[2] }),
    });
    assert.equal(login.status, 200);
    await serve.stop();
  });

  test('a data folder that is a file, or a host that does not resolve, is refused with one line naming it', async (t) => {
    const file = join(tempDir(t), 'not-a-folder');
    writeFileSync(file, 'x');
    for (const args of [['serve', '--port', '0'], ['init', '--yes'], ['keys', 'list', '--workspace', '1'], ['doctor']]) {
      const r = await runCli(file, args);
      assert.equal(r.code, 1, show(r));
      assert.deepEqual(lines(r.stderr), [`error: the data folder ${file} is a file, not a folder: name another with --data-dir (or SVC_DATA_DIR)`], show(r));
    }
    assert.equal(readFileSync(file, 'utf8'), 'x', 'the file is left as it was');

    const dataDir = join(tempDir(t), 'data');
    for (const port of ['0', '3999']) {
      const r = await runCli(dataDir, ['serve', '--host', 'nothing-here.invalid', '--port', port]);
      assert.equal(r.code, 1, show(r));
      assert.match(r.stderr, /^error: nothing-here\.invalid does not resolve to an address: choose another with --host \(or SVC_HOST\)$/m, show(r));
      assert.doesNotMatch(r.stdout, /svc listening/, show(r));
    }
  });

  test('two servers on one data folder: a key revoked by the CLI or through server A stops working on server B within 10 s', async (t) => {
    const dataDir = join(tempDir(t), 'shared');
    const init = await runCli(dataDir, ['init', '--yes', '--plan', 'PRO', '--json']);
    assert.equal(init.code, 0, show(init));
    const { workspace, user, password } = init.json();
    assert.equal(workspace.plan, 'PRO');

    const [a, b] = await Promise.all([startServe(t, dataDir), startServe(t, dataDir)]);
    assert.notEqual(a.url, b.url, 'two ports');

    // The generated password from init --json logs in.
    const ownerLogin = await login(a.url, user.email, password);
    assert.equal(ownerLogin.status, 200, ownerLogin.text);

    const mint = (role: string, name: string) =>
      runCli(dataDir, ['keys', 'create', '--workspace', String(workspace.id), '--role', role, '--name', name, '--json']);
    const [viewerRes, adminRes, memberRes] = await Promise.all([mint('VIEWER', 'viewer'), mint('ADMIN', 'admin'), mint('MEMBER', 'member')]);
    for (const r of [viewerRes, adminRes, memberRes]) assert.equal(r.code, 0, show(r));
    const viewer = viewerRes.json();
    const admin = adminRes.json();
    const member = memberRes.json();

    const contacts = (url: string, key: string) => request(url, 'GET', '/contacts', { token: key });
    for (const s of [a, b]) {
      for (const k of [viewer, admin, member]) {
        const res = await contacts(s.url, k.key);
        assert.equal(res.status, 200, `${k.role} key on ${s.url}: ${res.text}`);
      }
    }

    await t.test('revoked with svc keys revoke', async () => {
      const revoke = await runCli(dataDir, ['keys', 'revoke', String(viewer.id), '--json']);
      assert.equal(revoke.code, 0, show(revoke));
      const { revokedAt } = revoke.json();
      const deadline = Date.parse(revokedAt) + 10_000;
      const at = await pollUntil(async () => (await contacts(b.url, viewer.key)).status === 401, deadline);
      assert.ok(at !== undefined && at <= deadline, `server B still accepted the key 10 s after ${revokedAt}`);
      const res = await contacts(b.url, viewer.key);
      assert.equal(res.status, 401);
      assert.match(res.headers.get('www-authenticate') ?? '', /^Bearer/);
      assert.equal((await contacts(a.url, viewer.key)).status, 401, 'and on server A');
    });

    await t.test('revoked with DELETE /api-keys/:id on server A using an ADMIN key', async () => {
      const del = await request(a.url, 'DELETE', `/api-keys/${member.id}`, { token: admin.key });
      assert.equal(del.status, 204, del.text);
      const deadline = Date.now() + 10_000;
      const at = await pollUntil(async () => (await contacts(b.url, member.key)).status === 401, deadline);
      assert.ok(at !== undefined && at <= deadline, 'server B still accepted the key 10 s after DELETE on server A');
      // The ADMIN key itself still works on both.
      assert.equal((await contacts(b.url, admin.key)).status, 200);
      assert.equal((await contacts(a.url, admin.key)).status, 200);
      // The CLI sees the revocation too.
      const list = await runCli(dataDir, ['keys', 'list', '--workspace', String(workspace.id), '--json']);
      assert.equal(list.code, 0, show(list));
      assert.notEqual(list.json().find((k: { id: number }) => k.id === member.id).revokedAt, null);
    });

    const [sa, sb] = await Promise.all([a.stop('SIGTERM', 10_000), b.stop('SIGTERM', 10_000)]);
    assert.equal(sa.code, 0);
    assert.equal(sb.code, 0);
  });
});
