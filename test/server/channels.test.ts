/**
 * Channel settings (providers) through the real server: the outbox default, per-provider
 * validation, write-only credentials (kept across updates, encrypted at rest, never in a
 * response, the table or the audit trail), the role matrix and workspace isolation.
 * Contract: API.md sections 1, 2 (role matrix) and 5 (providers).
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { eq } from 'drizzle-orm';
import { auditLogs, channelSettings } from '../../src/core/db/schema.js';
import { resolveChannel } from '../../src/core/services/channels.js';
import { type HttpResult, assertProblem, buildAsOwner } from '../helpers.js';

const SMTP_PASS = 'smtp-pass-Zq8vN3rT';
const TWILIO_TOKEN = 'twilio-token-Hk29xLmQ';
const WA_TOKEN = 'wa-token-P0oR7sUv';
const SECRETS = [SMTP_PASS, TWILIO_TOKEN, WA_TOKEN];

const SMTP = {
  provider: 'smtp',
  settings: { host: 'mail.example.com', port: 587, from: 'news@example.com' },
  credentials: { user: 'mailer', pass: SMTP_PASS },
};
const TWILIO = { provider: 'twilio', settings: { accountSid: 'AC123', from: '+15005550006' }, credentials: { authToken: TWILIO_TOKEN } };
const WHATSAPP = { provider: 'whatsapp', settings: { phoneNumberId: '1098765' }, credentials: { accessToken: WA_TOKEN } };

const setup = (t: TestContext) => buildAsOwner(t);

function assertNoSecrets(text: string, where: string): void {
  for (const secret of SECRETS) assert.ok(!text.includes(secret), `${where} must not contain a credential`);
}

function assertValidation(res: HttpResult, path: string): void {
  assertProblem(res, 422, 'validation_failed');
  assert.ok(Array.isArray(res.body.errors), `errors[] present: ${res.text}`);
  assert.ok(
    res.body.errors.some((e: { path: string }) => e.path === path),
    `errors[] names ${path}: ${JSON.stringify(res.body.errors)}`,
  );
}

test('a fresh workspace uses the outbox on every channel', async (t) => {
  const { s, token } = await setup(t);
  const res = await s.request('GET', '/settings/channels', { token });
  assert.equal(res.status, 200, res.text);
  const outbox = { provider: 'outbox', settings: {}, hasCredentials: false };
  assert.deepEqual(res.body, { EMAIL: outbox, SMS: outbox, WHATSAPP: outbox });
});

test('PUT replaces the given channels, fills defaults, and never shows credentials', async (t) => {
  const { s, token } = await setup(t);
  const put = await s.request('PUT', '/settings/channels', { token, body: { EMAIL: SMTP, SMS: TWILIO, WHATSAPP: WHATSAPP } });
  assert.equal(put.status, 200, put.text);
  assert.deepEqual(put.body.EMAIL, {
    provider: 'smtp',
    settings: { host: 'mail.example.com', port: 587, secure: false, from: 'news@example.com', requireTLS: false },
    hasCredentials: true,
  });
  assert.deepEqual(put.body.SMS, {
    provider: 'twilio',
    settings: { baseUrl: 'https://api.twilio.com', accountSid: 'AC123', from: '+15005550006' },
    hasCredentials: true,
  });
  assert.deepEqual(put.body.WHATSAPP, {
    provider: 'whatsapp',
    settings: { baseUrl: 'https://graph.facebook.com/v20.0', phoneNumberId: '1098765' },
    hasCredentials: true,
  });
  assertNoSecrets(put.text, 'the PUT response');
  assert.ok(!put.text.includes('mailer'), 'the SMTP user is a credential too');

  const get = await s.request('GET', '/settings/channels', { token });
  assert.deepEqual(get.body, put.body);
  assertNoSecrets(get.text, 'the GET response');

  // Changing one channel leaves the others alone.
  const email = await s.request('PUT', '/settings/channels', { token, body: { EMAIL: { provider: 'outbox' } } });
  assert.equal(email.status, 200, email.text);
  assert.deepEqual(email.body.EMAIL, { provider: 'outbox', settings: {}, hasCredentials: false });
  assert.equal(email.body.SMS.provider, 'twilio');
  assert.equal(email.body.WHATSAPP.provider, 'whatsapp');
});

test('credentials are encrypted at rest and absent from the audit trail', async (t) => {
  const { s, token } = await setup(t);
  const put = await s.request('PUT', '/settings/channels', { token, body: { EMAIL: SMTP, SMS: TWILIO, WHATSAPP: WHATSAPP } });
  assert.equal(put.status, 200, put.text);

  const rows = await s.db.select().from(channelSettings).where(eq(channelSettings.workspaceId, s.workspaceId));
  assert.equal(rows.length, 3);
  assertNoSecrets(JSON.stringify(rows), 'the channel_settings table');
  for (const row of rows) assert.match(row.credentials ?? '', /^v1\./, 'stored as AES-GCM ciphertext');

  const audit = await s.db.select().from(auditLogs).where(eq(auditLogs.action, 'settings.channels_updated'));
  assert.equal(audit.length, 1);
  assert.deepEqual(audit[0]!.metadata, { channels: { EMAIL: 'smtp', SMS: 'twilio', WHATSAPP: 'whatsapp' } });
  assert.equal(audit[0]!.actorType, 'USER');
  assertNoSecrets(JSON.stringify(await s.db.select().from(auditLogs)), 'the audit log');

  // The engine reads them back decrypted.
  const sms = await resolveChannel(s.db, s.config, s.workspaceId, 'SMS');
  assert.deepEqual(sms, {
    provider: 'twilio',
    settings: { baseUrl: 'https://api.twilio.com', accountSid: 'AC123', from: '+15005550006' },
    credentials: { authToken: TWILIO_TOKEN },
  });
  assert.deepEqual((await resolveChannel(s.db, s.config, s.workspaceId, 'EMAIL')).credentials, { user: 'mailer', pass: SMTP_PASS });
});

test('omitted credentials are kept while the provider stays; a new provider needs its own', async (t) => {
  const { s, token } = await setup(t);
  assert.equal((await s.request('PUT', '/settings/channels', { token, body: { SMS: TWILIO } })).status, 200);

  // Same destination (the default base URL), other account and sender: the token is kept.
  const kept = await s.request('PUT', '/settings/channels', {
    token,
    body: { SMS: { provider: 'twilio', settings: { accountSid: 'AC999', from: '+15005550001' } } },
  });
  assert.equal(kept.status, 200, kept.text);
  assert.equal(kept.body.SMS.hasCredentials, true);
  assert.deepEqual((await resolveChannel(s.db, s.config, s.workspaceId, 'SMS')).credentials, { authToken: TWILIO_TOKEN });
  // A new destination with the credentials given again.
  const moved = await s.request('PUT', '/settings/channels', {
    token,
    body: {
      SMS: {
        provider: 'twilio',
        settings: { accountSid: 'AC999', from: '+15005550001', baseUrl: 'https://sms.example.net:8443/' },
        credentials: { authToken: TWILIO_TOKEN },
      },
    },
  });
  assert.equal(moved.status, 200, moved.text);
  assert.equal(moved.body.SMS.settings.baseUrl, 'https://sms.example.net:8443', 'stored without the trailing slash');
  // The same destination spelt differently (case, trailing slash) is not a change.
  const respelt = await s.request('PUT', '/settings/channels', {
    token,
    body: { SMS: { provider: 'twilio', settings: { accountSid: 'AC999', from: '+15005550001', baseUrl: 'https://SMS.example.net:8443' } } },
  });
  assert.equal(respelt.status, 200, respelt.text);
  assert.deepEqual((await resolveChannel(s.db, s.config, s.workspaceId, 'SMS')).credentials, { authToken: TWILIO_TOKEN });
  await s.request('PUT', '/settings/channels', { token, body: { SMS: TWILIO } });

  const rotated = await s.request('PUT', '/settings/channels', { token, body: { SMS: { ...TWILIO, credentials: { authToken: 'rotated-token' } } } });
  assert.equal(rotated.status, 200, rotated.text);
  assert.deepEqual((await resolveChannel(s.db, s.config, s.workspaceId, 'SMS')).credentials, { authToken: 'rotated-token' });

  // SMTP without an account is fine; switching EMAIL to SMTP keeps nothing from before.
  const noAuth = await s.request('PUT', '/settings/channels', { token, body: { EMAIL: { provider: 'smtp', settings: SMTP.settings } } });
  assert.equal(noAuth.status, 200, noAuth.text);
  assert.equal(noAuth.body.EMAIL.hasCredentials, false);
  // Empty credentials clear an SMTP account.
  await s.request('PUT', '/settings/channels', { token, body: { EMAIL: SMTP } });
  const cleared = await s.request('PUT', '/settings/channels', { token, body: { EMAIL: { ...SMTP, credentials: {} } } });
  assert.equal(cleared.body.EMAIL.hasCredentials, false);

  // Back to the outbox and then to twilio again: the old token is gone.
  await s.request('PUT', '/settings/channels', { token, body: { SMS: { provider: 'outbox' } } });
  const again = await s.request('PUT', '/settings/channels', { token, body: { SMS: { provider: 'twilio', settings: TWILIO.settings } } });
  assertValidation(again, '/SMS/credentials');
  assert.equal((await s.request('GET', '/settings/channels', { token })).body.SMS.provider, 'outbox', 'a refused PUT changes nothing');
});

test('PUT refuses invalid settings with 422 naming the field', async (t) => {
  const { s, token } = await setup(t);
  const cases: { name: string; body: unknown; path: string }[] = [
    { name: 'smtp on SMS', body: { SMS: SMTP }, path: '/SMS/provider' },
    { name: 'twilio on EMAIL', body: { EMAIL: TWILIO }, path: '/EMAIL/provider' },
    { name: 'whatsapp on SMS', body: { SMS: WHATSAPP }, path: '/SMS/provider' },
    { name: 'unknown provider', body: { EMAIL: { provider: 'sendgrid' } }, path: '/EMAIL/provider' },
    { name: 'missing host', body: { EMAIL: { ...SMTP, settings: { port: 25, from: 'a@example.com' } } }, path: '/EMAIL/settings/host' },
    { name: 'bad host', body: { EMAIL: { ...SMTP, settings: { ...SMTP.settings, host: 'mail example com' } } }, path: '/EMAIL/settings/host' },
    { name: 'bracketed IPv6 host', body: { EMAIL: { ...SMTP, settings: { ...SMTP.settings, host: '[::1]' } } }, path: '/EMAIL/settings/host' },
    { name: 'port out of range', body: { EMAIL: { ...SMTP, settings: { ...SMTP.settings, port: 70000 } } }, path: '/EMAIL/settings/port' },
    { name: 'port as text', body: { EMAIL: { ...SMTP, settings: { ...SMTP.settings, port: '25' } } }, path: '/EMAIL/settings/port' },
    { name: 'from not an address', body: { EMAIL: { ...SMTP, settings: { ...SMTP.settings, from: 'news' } } }, path: '/EMAIL/settings/from' },
    { name: 'secure not boolean', body: { EMAIL: { ...SMTP, settings: { ...SMTP.settings, secure: 'yes' } } }, path: '/EMAIL/settings/secure' },
    { name: 'typo in settings', body: { EMAIL: { ...SMTP, settings: { ...SMTP.settings, hots: 'x' } } }, path: '/EMAIL/settings/hots' },
    { name: 'unknown credential', body: { EMAIL: { ...SMTP, credentials: { user: 'u', password: 'p' } } }, path: '/EMAIL/credentials/password' },
    { name: 'bad base URL', body: { SMS: { ...TWILIO, settings: { ...TWILIO.settings, baseUrl: 'not a url' } } }, path: '/SMS/settings/baseUrl' },
    { name: 'ftp base URL', body: { SMS: { ...TWILIO, settings: { ...TWILIO.settings, baseUrl: 'ftp://api.twilio.com' } } }, path: '/SMS/settings/baseUrl' },
    {
      name: 'base URL with credentials',
      body: { WHATSAPP: { ...WHATSAPP, settings: { ...WHATSAPP.settings, baseUrl: 'https://u:p@graph.example.com' } } },
      path: '/WHATSAPP/settings/baseUrl',
    },
    {
      name: 'base URL with a query',
      body: { WHATSAPP: { ...WHATSAPP, settings: { ...WHATSAPP.settings, baseUrl: 'https://graph.example.com/?x=1' } } },
      path: '/WHATSAPP/settings/baseUrl',
    },
    {
      name: 'accountSid with a slash',
      body: { SMS: { ...TWILIO, settings: { ...TWILIO.settings, accountSid: 'AC1/../x' } } },
      path: '/SMS/settings/accountSid',
    },
    { name: 'twilio without from', body: { SMS: { ...TWILIO, settings: { accountSid: 'AC1' } } }, path: '/SMS/settings/from' },
    { name: 'twilio without a token', body: { SMS: { ...TWILIO, credentials: {} } }, path: '/SMS/credentials/authToken' },
    { name: 'twilio without credentials', body: { SMS: { provider: 'twilio', settings: TWILIO.settings } }, path: '/SMS/credentials' },
    { name: 'whatsapp without phoneNumberId', body: { WHATSAPP: { ...WHATSAPP, settings: {} } }, path: '/WHATSAPP/settings/phoneNumberId' },
    { name: 'whatsapp token not a string', body: { WHATSAPP: { ...WHATSAPP, credentials: { accessToken: 42 } } }, path: '/WHATSAPP/credentials/accessToken' },
    { name: 'outbox with settings', body: { SMS: { provider: 'outbox', settings: { from: 'x' } } }, path: '/SMS/settings/from' },
    { name: 'unknown channel', body: { FAX: { provider: 'outbox' } }, path: '/FAX' },
    { name: 'unknown field in a channel', body: { EMAIL: { ...SMTP, enabled: true } }, path: '/EMAIL/enabled' },
    { name: 'provider missing', body: { EMAIL: { settings: {} } }, path: '/EMAIL/provider' },
    { name: 'settings not an object', body: { EMAIL: { provider: 'smtp', settings: 'host=x' } }, path: '/EMAIL/settings' },
  ];
  for (const c of cases) {
    const res = await s.request('PUT', '/settings/channels', { token, body: c.body });
    try {
      assertValidation(res, c.path);
    } catch (err) {
      throw new Error(`${c.name}: ${(err as Error).message}`);
    }
    assertNoSecrets(res.text, `${c.name}: the problem`);
  }
  const res = await s.request('GET', '/settings/channels', { token });
  assert.ok(
    ['EMAIL', 'SMS', 'WHATSAPP'].every((c) => res.body[c].provider === 'outbox'),
    'nothing was stored',
  );
  assert.equal((await s.db.select().from(auditLogs).where(eq(auditLogs.action, 'settings.channels_updated'))).length, 0);

  const ipv6 = await s.request('PUT', '/settings/channels', {
    token,
    body: { EMAIL: { ...SMTP, settings: { ...SMTP.settings, host: '2606:4700:4700::1111' } } },
  });
  assert.equal(ipv6.status, 200, ipv6.text);
  await s.request('PUT', '/settings/channels', { token, body: { EMAIL: { provider: 'outbox' } } });

  // A literal private, loopback or reserved address is refused as it is saved, at its field,
  // rather than failing every send (a name is checked when it is resolved, at send time).
  for (const [body, path] of [
    [{ EMAIL: { ...SMTP, settings: { ...SMTP.settings, host: '127.0.0.1' } } }, '/EMAIL/settings/host'],
    [{ EMAIL: { ...SMTP, settings: { ...SMTP.settings, host: '::1' } } }, '/EMAIL/settings/host'],
    [{ EMAIL: { ...SMTP, settings: { ...SMTP.settings, host: '10.0.0.5' } } }, '/EMAIL/settings/host'],
    [{ SMS: { ...TWILIO, settings: { ...TWILIO.settings, baseUrl: 'http://169.254.169.254/latest' } } }, '/SMS/settings/baseUrl'],
    [{ WHATSAPP: { ...WHATSAPP, settings: { ...WHATSAPP.settings, baseUrl: 'https://[::1]:8443/v20.0' } } }, '/WHATSAPP/settings/baseUrl'],
    [{ SMS: { ...TWILIO, settings: { ...TWILIO.settings, baseUrl: 'http://0x7f000001' } } }, '/SMS/settings/baseUrl'],
    // Every spelling a resolver reads as an address (inet_aton's), in an SMTP host too.
    ...['0x7f000001', '2130706433', '0177.0.0.1', '0x7f.1', '127.1', '0', '::ffff:127.0.0.1', '::ffff:7f00:1'].map(
      (host) => [{ EMAIL: { ...SMTP, settings: { ...SMTP.settings, host } } }, '/EMAIL/settings/host'] as const,
    ),
  ] as const) {
    const res = await s.request('PUT', '/settings/channels', { token, body });
    assertProblem(res, 422, 'validation_failed');
    assert.deepEqual(
      res.body.errors.map((e: { path: string }) => e.path),
      [path],
    );
    assert.match(res.body.errors[0].message, /private, loopback or reserved address.*SVC_HTTP_ALLOWED_HOSTS/);
  }

  // Errors of several channels are reported together; one bad channel stores none.
  const both = await s.request('PUT', '/settings/channels', {
    token,
    body: { EMAIL: { provider: 'smtp', settings: {} }, SMS: TWILIO, WHATSAPP: { provider: 'smtp' } },
  });
  assertValidation(both, '/EMAIL/settings/host');
  assertValidation(both, '/WHATSAPP/provider');
  assert.equal((await s.request('GET', '/settings/channels', { token })).body.SMS.provider, 'outbox');
});

test('channel settings need ADMIN or above', async (t) => {
  const { s, token } = await setup(t);
  const viewer = await s.userWithRole('VIEWER');
  const member = await s.userWithRole('MEMBER');
  const admin = await s.userWithRole('ADMIN');
  const body = { EMAIL: SMTP };

  for (const [who, tok] of [
    ['VIEWER', viewer.token],
    ['MEMBER', member.token],
    ['MEMBER key', await s.mintKey('MEMBER')],
  ] as const) {
    assertProblem(await s.request('GET', '/settings/channels', { token: tok }), 403, 'forbidden');
    const res = await s.request('PUT', '/settings/channels', { token: tok, body });
    assertProblem(res, 403, 'forbidden');
    assert.ok(res.status === 403, who);
  }
  assertProblem(await s.request('GET', '/settings/channels'), 401);
  assertProblem(await s.request('PUT', '/settings/channels', { body }), 401);

  assert.equal((await s.request('PUT', '/settings/channels', { token: admin.token, body })).status, 200);
  assert.equal((await s.request('GET', '/settings/channels', { token: await s.mintKey('ADMIN') })).body.EMAIL.provider, 'smtp');
  assert.equal((await s.request('GET', '/settings/channels', { token })).status, 200, 'OWNER');
});

test("one workspace's channels are not another's", async (t) => {
  const { s, token } = await setup(t);
  const other = await s.otherWorkspace();
  assert.equal((await s.request('PUT', '/settings/channels', { token, body: { EMAIL: SMTP } })).status, 200);
  const theirs = await s.request('GET', '/settings/channels', { token: other.token });
  assert.equal(theirs.body.EMAIL.provider, 'outbox');
  assertNoSecrets(theirs.text, 'the other workspace');
  assert.equal((await resolveChannel(s.db, s.config, other.workspaceId, 'EMAIL')).provider, 'outbox');
});

test('a changed destination needs the credentials again: SMTP host, port or TLS mode, Twilio and WhatsApp base URL (422 at /…/credentials)', async (t) => {
  const { s, token } = await setup(t);
  const put = await s.request('PUT', '/settings/channels', { token, body: { EMAIL: SMTP, SMS: TWILIO, WHATSAPP: WHATSAPP } });
  assert.equal(put.status, 200, put.text);
  const stored = () =>
    s.db
      .select({
        channel: channelSettings.channel,
        provider: channelSettings.provider,
        settings: channelSettings.settings,
        credentials: channelSettings.credentials,
      })
      .from(channelSettings)
      .where(eq(channelSettings.workspaceId, s.workspaceId))
      .orderBy(channelSettings.channel);
  const before = JSON.stringify(await stored());

  const redirects: { name: string; body: Record<string, unknown>; path: string }[] = [
    { name: 'SMTP host', body: { EMAIL: { provider: 'smtp', settings: { ...SMTP.settings, host: 'mail.attacker.test' } } }, path: '/EMAIL/credentials' },
    { name: 'SMTP port', body: { EMAIL: { provider: 'smtp', settings: { ...SMTP.settings, port: 2525 } } }, path: '/EMAIL/credentials' },
    { name: 'SMTP secure', body: { EMAIL: { provider: 'smtp', settings: { ...SMTP.settings, secure: true } } }, path: '/EMAIL/credentials' },
    { name: 'SMTP requireTLS', body: { EMAIL: { provider: 'smtp', settings: { ...SMTP.settings, requireTLS: true } } }, path: '/EMAIL/credentials' },
    {
      name: 'Twilio baseUrl',
      body: { SMS: { provider: 'twilio', settings: { ...TWILIO.settings, baseUrl: 'https://collect.attacker.test' } } },
      path: '/SMS/credentials',
    },
    {
      name: 'WhatsApp baseUrl',
      body: { WHATSAPP: { provider: 'whatsapp', settings: { ...WHATSAPP.settings, baseUrl: 'https://graph.attacker.test/v20.0' } } },
      path: '/WHATSAPP/credentials',
    },
    {
      name: 'one good channel and one redirected: nothing is saved',
      body: { EMAIL: { provider: 'outbox' }, SMS: { provider: 'twilio', settings: { ...TWILIO.settings, baseUrl: 'https://collect.attacker.test' } } },
      path: '/SMS/credentials',
    },
  ];
  for (const r of redirects) {
    const res = await s.request('PUT', '/settings/channels', { token, body: r.body });
    assertValidation(res, r.path);
    assertNoSecrets(res.text, r.name);
    assert.equal(JSON.stringify(await stored()), before, `${r.name}: a refused PUT changes nothing`);
  }
  // The engine still sends with the original destination and credentials.
  assert.equal((await resolveChannel(s.db, s.config, s.workspaceId, 'EMAIL')).settings.host, 'mail.example.com');
  assert.equal((await resolveChannel(s.db, s.config, s.workspaceId, 'SMS')).settings.baseUrl, 'https://api.twilio.com');

  // A change that is not a destination keeps them (the sender address, the host's case).
  const sender = await s.request('PUT', '/settings/channels', {
    token,
    body: { EMAIL: { provider: 'smtp', settings: { ...SMTP.settings, host: 'MAIL.example.com', from: 'hello@example.com' } } },
  });
  assert.equal(sender.status, 200, sender.text);
  assert.deepEqual((await resolveChannel(s.db, s.config, s.workspaceId, 'EMAIL')).credentials, { user: 'mailer', pass: SMTP_PASS });
  // A new destination with credentials given is accepted; with an empty set for SMTP, too (no account).
  const movedWith = await s.request('PUT', '/settings/channels', {
    token,
    body: { EMAIL: { ...SMTP, settings: { ...SMTP.settings, host: 'smtp.example.org' } } },
  });
  assert.equal(movedWith.status, 200, movedWith.text);
  const movedEmpty = await s.request('PUT', '/settings/channels', {
    token,
    body: { EMAIL: { ...SMTP, settings: { ...SMTP.settings, host: 'smtp2.example.org' }, credentials: {} } },
  });
  assert.equal(movedEmpty.status, 200, movedEmpty.text);
  assert.equal(movedEmpty.body.EMAIL.hasCredentials, false);
  // An SMTP channel without an account can move freely: there is nothing to redirect.
  const free = await s.request('PUT', '/settings/channels', {
    token,
    body: { EMAIL: { provider: 'smtp', settings: { ...SMTP.settings, host: 'smtp3.example.org' } } },
  });
  assert.equal(free.status, 200, free.text);
  const audit = await s.db.select({ id: auditLogs.id }).from(auditLogs).where(eq(auditLogs.action, 'settings.channels_updated'));
  assert.equal(audit.length, 5, 'each accepted PUT is audited, no refused one');
});
