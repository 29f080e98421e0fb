import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { lines, runCli, show, type CliResult } from './helpers.js';

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/;

/** API.md section 6: a non-zero exit, nothing on stdout, a one-line message on stderr. */
function assertOneLineError(r: CliResult, message?: RegExp): void {
  assert.notEqual(r.code, 0, show(r));
  assert.equal(r.stdout, '', `nothing on stdout on error\n${show(r)}`);
  assert.equal(lines(r.stderr).length, 1, `one line on stderr\n${show(r)}`);
  if (message) assert.match(r.stderr, message, show(r));
}

describe('svc workspace / user / admin / keys', { concurrency: true }, () => {
  let dataDir: string;
  let starter: { id: number; name: string; plan: string };
  let owner: { id: number; email: string };

  // One data folder for the whole suite; each test below works on its own rows.
  const root = mkdtempSync(join(tmpdir(), 'svc-cli-cmds-'));
  after(() => rmSync(root, { recursive: true, force: true }));

  before(async () => {
    dataDir = join(root, 'data');
    const r = await runCli(dataDir, ['init', '--yes', '--plan', 'STARTER', '--json']);
    assert.equal(r.code, 0, show(r));
    const doc = r.json();
    starter = doc.workspace;
    owner = doc.user;
  });

  test('workspace create / list / show / set-plan', async (t) => {
    let created: { id: number; name: string; plan: string; createdAt: string; updatedAt: string };

    await t.test('create --name --plan GROWTH --json prints the workspace', async () => {
      const r = await runCli(dataDir, ['workspace', 'create', '--name', 'Growth Co', '--plan', 'GROWTH', '--json']);
      assert.equal(r.code, 0, show(r));
      created = r.json();
      assert.ok(Number.isInteger(created.id) && created.id > 0);
      assert.notEqual(created.id, starter.id);
      assert.equal(created.name, 'Growth Co');
      assert.equal(created.plan, 'GROWTH');
      assert.match(created.createdAt, ISO);
      assert.match(created.updatedAt, ISO);
    });

    await t.test('list --json includes both workspaces', async () => {
      const r = await runCli(dataDir, ['workspace', 'list', '--json']);
      assert.equal(r.code, 0, show(r));
      const all = r.json();
      assert.ok(Array.isArray(all), 'a JSON array');
      const ids = all.map((w: { id: number }) => w.id);
      assert.ok(ids.includes(starter.id) && ids.includes(created.id), r.stdout);
      assert.deepEqual(
        all.find((w: { id: number }) => w.id === created.id),
        created,
      );
    });

    await t.test('list without --json prints a table', async () => {
      const r = await runCli(dataDir, ['workspace', 'list']);
      assert.equal(r.code, 0, show(r));
      const [header, ...rows] = lines(r.stdout);
      assert.match(header!, /^ID\s+NAME\s+PLAN\b/);
      assert.ok(
        rows.some((l) => new RegExp(`^${created.id}\\s+Growth Co\\s+GROWTH\\b`).test(l)),
        r.stdout,
      );
      assert.ok(
        rows.some((l) => new RegExp(`^${starter.id}\\s+`).test(l)),
        r.stdout,
      );
    });

    await t.test('show ID --json prints the workspace', async () => {
      const r = await runCli(dataDir, ['workspace', 'show', String(created.id), '--json']);
      assert.equal(r.code, 0, show(r));
      assert.deepEqual(r.json(), created);
    });

    await t.test('set-plan ID PRO --json changes the plan', async () => {
      const r = await runCli(dataDir, ['workspace', 'set-plan', String(created.id), 'PRO', '--json']);
      assert.equal(r.code, 0, show(r));
      const w = r.json();
      assert.equal(w.id, created.id);
      assert.equal(w.plan, 'PRO');
      assert.equal(w.name, 'Growth Co');
    });

    await t.test('unknown plan, unknown id and a non-numeric id are refused', async () => {
      const results = await Promise.all([
        runCli(dataDir, ['workspace', 'create', '--name', 'Bad', '--plan', 'PLATINUM', '--json']),
        runCli(dataDir, ['workspace', 'set-plan', String(created.id), 'PLATINUM', '--json']),
        runCli(dataDir, ['workspace', 'show', '99999', '--json']),
        runCli(dataDir, ['workspace', 'show', 'abc', '--json']),
      ]);
      const [badCreate, badPlan, unknownShow, nonNumeric] = results;
      assertOneLineError(badCreate!, /plan/i);
      assertOneLineError(badPlan!, /plan/i);
      assertOneLineError(unknownShow!, /99999/);
      assertOneLineError(nonNumeric!, /abc|integer|id/i);
    });
  });

  test('user create / passwd and admin grant / revoke', async (t) => {
    const email = 'member@example.com';
    let member: { id: number; email: string };

    await t.test('user create --password-stdin --json prints {id, email}', async () => {
      const r = await runCli(
        dataDir,
        ['user', 'create', '--email', 'Member@Example.com', '--workspace', String(starter.id), '--role', 'MEMBER', '--password-stdin', '--json'],
        { stdin: 'member-password-1\n' },
      );
      assert.equal(r.code, 0, show(r));
      member = r.json();
      assert.deepEqual(Object.keys(member).sort(), ['email', 'id']);
      assert.equal(member.email, email);
      assert.ok(Number.isInteger(member.id) && member.id !== owner.id);
      assert.ok(!r.stdout.includes('member-password-1') && !r.stderr.includes('member-password-1'));
    });

    await t.test('a second membership in the same workspace is refused; an unknown role too', async () => {
      const [dup, badRole] = await Promise.all([
        runCli(dataDir, ['user', 'create', '--email', email, '--workspace', String(starter.id), '--role', 'VIEWER', '--password-stdin', '--json'], {
          stdin: 'another-password-1\n',
        }),
        runCli(dataDir, ['user', 'create', '--email', 'x@example.com', '--workspace', String(starter.id), '--role', 'EMPEROR', '--password-stdin', '--json'], {
          stdin: 'another-password-1\n',
        }),
      ]);
      assertOneLineError(dup!, /member/i);
      assertOneLineError(badRole!, /role/i);
    });

    await t.test('user passwd E --password-stdin --json prints {id, email}; short password and unknown email refused', async () => {
      const [ok, short, unknown, noStdin] = await Promise.all([
        runCli(dataDir, ['user', 'passwd', email, '--password-stdin', '--json'], { stdin: 'a-new-password-2\n' }),
        runCli(dataDir, ['user', 'passwd', email, '--password-stdin', '--json'], { stdin: 'short\n' }),
        runCli(dataDir, ['user', 'passwd', 'nobody@example.com', '--password-stdin', '--json'], { stdin: 'a-new-password-2\n' }),
        // No TTY and no --password-stdin: nothing prompts, the command fails and says how.
        runCli(dataDir, ['user', 'passwd', email, '--json']),
      ]);
      assert.equal(ok.code, 0, show(ok));
      assert.deepEqual(ok.json(), { id: member.id, email });
      assertOneLineError(short!, /password/i);
      assertOneLineError(unknown!, /nobody@example\.com|no user|not found/i);
      assertOneLineError(noStdin!, /password-stdin/);
    });

    await t.test('admin grant / revoke E --json print {id, email, isSuperAdmin}; unknown email refused', async () => {
      const grant = await runCli(dataDir, ['admin', 'grant', email, '--json']);
      assert.equal(grant.code, 0, show(grant));
      assert.deepEqual(grant.json(), { id: member.id, email, isSuperAdmin: true });

      const revoke = await runCli(dataDir, ['admin', 'revoke', email, '--json']);
      assert.equal(revoke.code, 0, show(revoke));
      assert.deepEqual(revoke.json(), { id: member.id, email, isSuperAdmin: false });

      const unknown = await runCli(dataDir, ['admin', 'grant', 'ghost@example.com', '--json']);
      assertOneLineError(unknown, /ghost@example\.com|no user|not found/i);

      // The owner init made is now the only super-admin: revoking it would leave none.
      const last = await runCli(dataDir, ['admin', 'revoke', owner.email, '--json']);
      assertOneLineError(last, /is the last super-admin: grant the flag to another user first/);
    });
  });

  test('keys create / list / revoke', async (t) => {
    let growth: { id: number };
    let viewer: { id: number; name: string; role: string; key: string; prefix: string };
    let memberKey: { id: number; key: string };

    await t.test('create VIEWER on Starter --json prints {id, name, role, key, prefix} with a svc_live_ key', async () => {
      const r = await runCli(dataDir, ['keys', 'create', '--workspace', String(starter.id), '--role', 'VIEWER', '--name', 'k', '--json']);
      assert.equal(r.code, 0, show(r));
      viewer = r.json();
      assert.deepEqual(Object.keys(viewer).sort(), ['id', 'key', 'name', 'prefix', 'role']);
      assert.ok(Number.isInteger(viewer.id) && viewer.id > 0);
      assert.equal(viewer.name, 'k');
      assert.equal(viewer.role, 'VIEWER');
      assert.match(viewer.key, /^svc_live_[0-9A-Za-z]{28,}$/);
      // At least 160 bits of randomness: base62 carries ~5.95 bits per character.
      assert.ok((viewer.key.length - 'svc_live_'.length) * Math.log2(62) >= 160, viewer.key);
      assert.ok(viewer.key.startsWith(viewer.prefix), 'the prefix is the start of the key');
      assert.ok(viewer.prefix.length < viewer.key.length - 16, 'the prefix does not reveal the key');
    });

    await t.test('OWNER is refused; MEMBER on Starter is refused with a message about the plan', async () => {
      const [ownerKey, memberOnStarter, noWs] = await Promise.all([
        runCli(dataDir, ['keys', 'create', '--workspace', String(starter.id), '--role', 'OWNER', '--name', 'o', '--json']),
        runCli(dataDir, ['keys', 'create', '--workspace', String(starter.id), '--role', 'MEMBER', '--name', 'm', '--json']),
        runCli(dataDir, ['keys', 'create', '--workspace', '99999', '--role', 'VIEWER', '--name', 'v', '--json']),
      ]);
      assertOneLineError(ownerKey!, /OWNER/);
      assertOneLineError(memberOnStarter!, /plan/i);
      assertOneLineError(noWs!, /99999|workspace/i);
    });

    await t.test('MEMBER on a Growth workspace is minted', async () => {
      const ws = await runCli(dataDir, ['workspace', 'create', '--name', 'Keys Growth', '--plan', 'GROWTH', '--json']);
      assert.equal(ws.code, 0, show(ws));
      growth = ws.json();
      const r = await runCli(dataDir, ['keys', 'create', '--workspace', String(growth.id), '--role', 'MEMBER', '--name', 'member key', '--json']);
      assert.equal(r.code, 0, show(r));
      memberKey = r.json();
      assert.equal(r.json().role, 'MEMBER');
      assert.match(memberKey.key, /^svc_live_/);
      assert.notEqual(memberKey.key, viewer.key);
    });

    await t.test('list --workspace --json never contains the raw key (or its hash)', async () => {
      const r = await runCli(dataDir, ['keys', 'list', '--workspace', String(starter.id), '--json']);
      assert.equal(r.code, 0, show(r));
      const all = r.json();
      assert.ok(Array.isArray(all), 'a JSON array');
      const k = all.find((x: { id: number }) => x.id === viewer.id);
      assert.ok(k, r.stdout);
      assert.equal(k.name, 'k');
      assert.equal(k.role, 'VIEWER');
      assert.equal(k.prefix, viewer.prefix);
      assert.equal(k.revokedAt, null);
      assert.ok(!('key' in k), 'no key field in a list');
      assert.ok(!r.stdout.includes(viewer.key), 'the raw key must never be listed');
      assert.ok(!/hash/i.test(r.stdout), 'no hash in the list');
      // Keys are per workspace.
      assert.ok(!all.some((x: { id: number }) => x.id === memberKey.id), 'the Growth workspace key is not listed for Starter');
    });

    await t.test('list without --json prints a table without the raw key', async () => {
      const r = await runCli(dataDir, ['keys', 'list', '--workspace', String(starter.id)]);
      assert.equal(r.code, 0, show(r));
      const [header, ...rows] = lines(r.stdout);
      assert.match(header!, /^ID\s+NAME\s+ROLE\s+PREFIX\b/);
      assert.ok(
        rows.some((l) => new RegExp(`^${viewer.id}\\s+k\\s+VIEWER\\s+`).test(l)),
        r.stdout,
      );
      assert.ok(!r.stdout.includes(viewer.key));
    });

    await t.test('revoke KEY_ID --json prints {id, revokedAt}; the list shows it revoked; unknown id refused', async () => {
      const r = await runCli(dataDir, ['keys', 'revoke', String(viewer.id), '--json']);
      assert.equal(r.code, 0, show(r));
      const doc = r.json();
      assert.deepEqual(Object.keys(doc).sort(), ['id', 'revokedAt']);
      assert.equal(doc.id, viewer.id);
      assert.match(doc.revokedAt, ISO);

      const [list, unknown] = await Promise.all([
        runCli(dataDir, ['keys', 'list', '--workspace', String(starter.id), '--json']),
        runCli(dataDir, ['keys', 'revoke', '99999', '--json']),
      ]);
      assert.equal(list.json().find((x: { id: number }) => x.id === viewer.id).revokedAt, doc.revokedAt);
      assertOneLineError(unknown!, /99999|not found|no api key/i);
    });
  });

  test('usage errors (missing option, unknown command) exit non-zero with a one-line message', async () => {
    const results = await Promise.all([
      runCli(dataDir, ['keys', 'create', '--workspace', String(starter.id), '--role', 'VIEWER', '--json']),
      runCli(dataDir, ['frobnicate', '--json']),
    ]);
    const [missingOption, unknownCommand] = results;
    assertOneLineError(missingOption!, /--name/);
    assertOneLineError(unknownCommand!, /frobnicate/);
  });
});
