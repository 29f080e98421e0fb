import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { HttpRequestError, httpPolicyFrom, isBlockedAddress, safeRequest, type HttpPolicy } from '../../src/engine/http.js';
import { sniServer } from '../tlsServer.js';

// ---------------------------------------------------------------------------------------
// Local servers (127.0.0.1, or dual-stack :: where noted); nothing outside is contacted.

interface Local {
  server: Server;
  port: number;
  /** 'connection' events seen. */
  connections: number;
  /** Requests seen. */
  requests: Array<{ method: string; url: string; headers: IncomingMessage['headers']; body: string }>;
  origin: string;
}

const opened: Local[] = [];

async function serve(handler: (req: IncomingMessage, res: ServerResponse, body: string) => void, host = '127.0.0.1'): Promise<Local> {
  const local = { connections: 0, requests: [] } as unknown as Local;
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      const body = Buffer.concat(parts).toString('utf8');
      local.requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      handler(req, res, body);
    });
  });
  server.on('connection', () => {
    local.connections++;
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => resolve());
  });
  local.server = server;
  local.port = (server.address() as { port: number }).port;
  local.origin = `http://127.0.0.1:${local.port}`;
  opened.push(local);
  return local;
}

async function closeAll(): Promise<void> {
  await Promise.all(
    opened.map(
      (l) =>
        new Promise<void>((resolve) => {
          l.server.closeAllConnections();
          l.server.close(() => resolve());
        }),
    ),
  );
}

const ok = (_req: IncomingMessage, res: ServerResponse): void => {
  res.setHeader('x-reply', 'yes');
  res.end('hello');
};

function policy(over: Partial<HttpPolicy> = {}): HttpPolicy {
  return { allowPrivate: false, allowedHosts: [], timeoutMs: 2000, maxResponseBytes: 64 * 1024, ...over };
}

async function refused(promise: Promise<unknown>, code: HttpRequestError['code']): Promise<HttpRequestError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof HttpRequestError, `expected HttpRequestError, got ${String(err)}`);
    assert.equal(err.code, code, `expected ${code}, got ${err.code}: ${err.message}`);
    return err;
  }
  assert.fail(`expected ${code}, but the request succeeded`);
}

after(closeAll);

// ---------------------------------------------------------------------------------------

describe('isBlockedAddress', () => {
  const blocked = [
    '127.0.0.1',
    '127.255.255.254',
    '0.0.0.0',
    '0.1.2.3',
    '10.0.0.1',
    '10.255.255.255',
    '172.16.0.1',
    '172.31.255.255',
    '192.168.1.1',
    '169.254.169.254',
    '169.254.0.1',
    '100.64.0.1',
    '100.127.255.255',
    '224.0.0.1',
    '239.255.255.250',
    '240.0.0.1',
    '255.255.255.255',
    '192.0.0.170',
    '198.18.0.1',
    '192.0.2.1',
    '::',
    '::1',
    'fc00::1',
    'fd12:3456::1',
    'fe80::1',
    'fe80::1%eth0',
    'febf::1',
    'fec0::1',
    'ff02::1',
    '100::1',
    '::ffff:127.0.0.1',
    '::ffff:7f00:1',
    '0:0:0:0:0:ffff:7f00:0001',
    '::ffff:10.0.0.1',
    '::ffff:169.254.169.254',
    '::127.0.0.1',
    '::7f00:1',
    '::ffff:0:127.0.0.1',
    '64:ff9b::127.0.0.1',
    '64:ff9b::a9fe:a9fe',
    '64:ff9b:1::1',
    '2002:7f00:1::1',
    '2002:c0a8:101::',
    '2001::1',
    '2001:db8::1',
    // not canonical literals: refused rather than guessed at
    '2130706433',
    '0x7f.0.0.1',
    '0177.0.0.1',
    '127.1',
    'localhost',
    '',
    'not an ip',
  ];
  const allowed = [
    '8.8.8.8',
    '1.1.1.1',
    '93.184.216.34',
    '172.15.255.255',
    '172.32.0.1',
    '100.63.255.255',
    '100.128.0.1',
    '169.253.255.255',
    '11.0.0.1',
    '223.255.255.255',
    '2606:4700:4700::1111',
    '2a00:1450:4001:80b::200e',
    '::ffff:8.8.8.8',
    '64:ff9b::8.8.8.8',
    '2002:808:808::1',
  ];
  for (const ip of blocked) test(`blocks ${JSON.stringify(ip)}`, () => assert.equal(isBlockedAddress(ip), true));
  for (const ip of allowed) test(`allows ${ip}`, () => assert.equal(isBlockedAddress(ip), false));
});

test('httpPolicyFrom copies the config fields and defaults maxRedirects to 5 and the per-host cap to 256', () => {
  const p = httpPolicyFrom({ httpAllowPrivate: true, httpAllowedHosts: ['a:1'], httpTimeoutMs: 1234, httpMaxResponseBytes: 4096 });
  assert.deepEqual(p, { allowPrivate: true, allowedHosts: ['a:1'], timeoutMs: 1234, maxResponseBytes: 4096, maxRedirects: 5, perHostConcurrency: 256 });
  assert.equal(
    httpPolicyFrom({ httpAllowPrivate: false, httpAllowedHosts: [], httpTimeoutMs: 1, httpMaxResponseBytes: 1, outboundPerHostConcurrency: 7 })
      .perHostConcurrency,
    7,
  );
});

describe('blocked targets are refused before any socket opens', () => {
  let trap: Local;
  let dualStack = true;
  before(async () => {
    // Listening on :: (dual-stack) catches 127.0.0.1, 0.0.0.0, ::1 and ::ffff:127.0.0.1 alike.
    try {
      trap = await serve(ok, '::');
    } catch {
      dualStack = false;
      trap = await serve(ok, '127.0.0.1');
    }
  });

  const literals = (port: number): string[] => [
    `http://127.0.0.1:${port}/`,
    `http://[::1]:${port}/`,
    `http://[::ffff:127.0.0.1]:${port}/`,
    `http://[::ffff:7f00:1]:${port}/`,
    `http://0.0.0.0:${port}/`,
    `http://2130706433:${port}/`,
    `http://0x7f.0.0.1:${port}/`,
    `http://0177.0.0.1:${port}/`,
    `http://127.1:${port}/`,
    `http://localhost:${port}/`,
    `http://LOCALHOST.:${port}/`,
    `https://127.0.0.1:${port}/`,
  ];

  test('loopback in every spelling, and localhost', async () => {
    for (const url of literals(trap.port)) {
      const err = await refused(safeRequest({ method: 'GET', url }, policy()), 'blocked_address');
      assert.match(err.message, /private, loopback or reserved/);
    }
    assert.equal(trap.connections, 0);
  });

  test('private, link-local (metadata) and other reserved literals', async () => {
    for (const url of [
      'http://10.0.0.1/',
      'http://169.254.169.254/latest/meta-data/',
      'http://192.168.0.1:8080/',
      'http://172.16.5.4/',
      'http://100.64.0.1/',
      'http://224.0.0.1/',
      'http://255.255.255.255/',
      'http://[fd00::1]/',
      'http://[fe80::1]/',
      'http://[64:ff9b::7f00:1]/',
    ]) {
      const started = Date.now();
      await refused(safeRequest({ method: 'GET', url }, policy()), 'blocked_address');
      assert.ok(Date.now() - started < 500, `${url} was not refused at once`);
    }
  });

  test('with allowPrivate the same requests go through', async () => {
    const urls = literals(trap.port).filter((u) => !u.startsWith('https:') && (dualStack || !u.includes('[')));
    for (const url of urls) {
      const res = await safeRequest({ method: 'GET', url }, policy({ allowPrivate: true }));
      assert.equal(res.status, 200, url);
      assert.equal(res.body, 'hello');
      assert.equal(res.headers['x-reply'], 'yes');
      assert.equal(res.truncated, false);
    }
    assert.equal(trap.requests.length, urls.length);
  });
});

describe('resolution happens in the connector', () => {
  test('a name that resolves to loopback is refused; the vetted address is the one connected to', async () => {
    const target = await serve((req, res) => res.end(String(req.headers.host)));
    let lookups = 0;
    const toLoopback = async () => {
      lookups++;
      return [{ address: '127.0.0.1', family: 4 }];
    };
    await refused(safeRequest({ method: 'GET', url: `http://rebind.test:${target.port}/` }, policy(), { lookup: toLoopback }), 'blocked_address');
    assert.equal(target.connections, 0);
    assert.equal(lookups, 1);

    // ANY refused address refuses the name, even when a public one comes first.
    const mixed = async () => [
      { address: '93.184.216.34', family: 4 },
      { address: '127.0.0.1', family: 4 },
    ];
    await refused(safeRequest({ method: 'GET', url: `http://mixed.test:${target.port}/` }, policy(), { lookup: mixed }), 'blocked_address');
    assert.equal(target.connections, 0);

    // Allowed: one lookup, connect to what it returned, Host stays the name.
    lookups = 0;
    const res = await safeRequest({ method: 'GET', url: `http://rebind.test:${target.port}/` }, policy({ allowPrivate: true }), { lookup: toLoopback });
    assert.equal(res.body, `rebind.test:${target.port}`);
    assert.equal(lookups, 1);
    assert.equal(target.connections, 1);
  });

  test('a name that does not resolve is a network error', async () => {
    const none = async () => {
      throw Object.assign(new Error('getaddrinfo ENOTFOUND nowhere.test'), { code: 'ENOTFOUND' });
    };
    await refused(safeRequest({ method: 'GET', url: 'http://nowhere.test/' }, policy(), { lookup: none }), 'network');
    await refused(safeRequest({ method: 'GET', url: 'http://empty.test/' }, policy(), { lookup: async () => [] }), 'network');
  });

  test('https keeps SNI on the host name and verifies the certificate against it', async (t) => {
    const { port, seen } = await sniServer(t, 'sni.test');
    const err = await refused(
      safeRequest({ method: 'GET', url: `https://sni.test:${port}/` }, policy({ allowPrivate: true }), {
        lookup: async () => [{ address: '127.0.0.1', family: 4 }],
      }),
      'network',
    );
    assert.match(err.message, /self[- ]signed|certificate/i);
    assert.deepEqual(seen, ['sni.test']);
  });
});

describe('allowedHosts', () => {
  test('lets exactly one host:port through', async () => {
    const a = await serve(ok);
    const b = await serve(ok);
    const p = policy({ allowedHosts: [`127.0.0.1:${a.port}`] });
    const res = await safeRequest({ method: 'GET', url: `${a.origin}/x` }, p);
    assert.equal(res.status, 200);
    assert.equal(res.body, 'hello');
    await refused(safeRequest({ method: 'GET', url: `${b.origin}/x` }, p), 'blocked_address');
    // Another name for the same address is another host.
    await refused(safeRequest({ method: 'GET', url: `http://localhost:${a.port}/x` }, p), 'blocked_address');
    assert.equal(a.connections, 1);
    assert.equal(b.connections, 0);
  });

  test('an allowed name is looked up and may resolve to loopback', async () => {
    const a = await serve(ok);
    const res = await safeRequest({ method: 'GET', url: `http://localhost:${a.port}/` }, policy({ allowedHosts: [`localhost:${a.port}`] }));
    assert.equal(res.body, 'hello');
  });
});

describe('redirects', () => {
  test('a redirect from an allowed host to a refused one is refused before connecting', async () => {
    const target = await serve(ok);
    for (const location of [`http://127.0.0.1:${target.port}/secret`, `http://localhost:${target.port}/secret`, `http://[::ffff:127.0.0.1]:${target.port}/`]) {
      const redirector = await serve((_req, res) => {
        res.writeHead(302, { location });
        res.end();
      });
      await refused(
        safeRequest({ method: 'GET', url: `${redirector.origin}/go` }, policy({ allowedHosts: [`127.0.0.1:${redirector.port}`] })),
        'blocked_address',
      );
      assert.equal(redirector.requests.length, 1);
    }
    assert.equal(target.connections, 0);
  });

  test('POST becomes GET without body on 301/302/303; 307/308 keep method and body', async () => {
    const target = await serve((req, res, body) => res.end(JSON.stringify({ method: req.method, body, type: req.headers['content-type'] ?? null })));
    const redirector = await serve((req, res) => {
      res.writeHead(Number(req.url!.slice(1)), { location: `${target.origin}/landed` });
      res.end('moved');
    });
    const p = policy({ allowPrivate: true });
    const cases: Array<[string, number, string, string, string | null]> = [
      ['POST', 301, 'GET', '', null],
      ['POST', 302, 'GET', '', null],
      ['POST', 303, 'GET', '', null],
      ['PUT', 303, 'GET', '', null],
      ['PUT', 302, 'PUT', 'payload', 'text/plain'],
      ['POST', 307, 'POST', 'payload', 'text/plain'],
      ['POST', 308, 'POST', 'payload', 'text/plain'],
    ];
    for (const [method, status, expectMethod, expectBody, expectType] of cases) {
      const res = await safeRequest({ method, url: `${redirector.origin}/${status}`, headers: { 'content-type': 'text/plain' }, body: 'payload' }, p);
      assert.deepEqual(JSON.parse(res.body), { method: expectMethod, body: expectBody, type: expectType }, `${method} ${status}`);
      assert.equal(res.url, `${target.origin}/landed`);
    }
  });

  test('relative locations resolve against the current URL; credentials do not cross origins', async () => {
    const other = await serve((req, res) =>
      res.end(JSON.stringify({ auth: req.headers.authorization ?? null, cookie: req.headers.cookie ?? null, keep: req.headers['x-keep'] ?? null })),
    );
    const first = await serve((req, res) => {
      if (req.url === '/start') {
        res.writeHead(302, { location: 'next?x=1' });
      } else if (req.url === '/next?x=1') {
        res.writeHead(307, { location: `${other.origin}/end` });
      }
      res.end();
    });
    const res = await safeRequest(
      { method: 'GET', url: `${first.origin}/start`, headers: { Authorization: 'Bearer s3cret', Cookie: 'a=b', 'X-Keep': 'kept' } },
      policy({ allowPrivate: true }),
    );
    assert.deepEqual(JSON.parse(res.body), { auth: null, cookie: null, keep: 'kept' });
    assert.deepEqual(
      first.requests.map((r) => [r.url, r.headers.authorization]),
      [
        ['/start', 'Bearer s3cret'],
        ['/next?x=1', 'Bearer s3cret'],
      ],
    );
  });

  test('too many redirects', async () => {
    const loop = await serve((req, res) => {
      res.writeHead(302, { location: `/hop${Number(req.url!.slice(4) || 0) + 1}` });
      res.end();
    });
    const err = await refused(
      safeRequest({ method: 'GET', url: `${loop.origin}/hop0` }, policy({ allowPrivate: true, maxRedirects: 3 })),
      'too_many_redirects',
    );
    assert.match(err.message, /3 redirects/);
    assert.equal(loop.requests.length, 4);
    loop.requests.length = 0;
    await refused(safeRequest({ method: 'GET', url: `${loop.origin}/hop0` }, policy({ allowPrivate: true })), 'too_many_redirects');
    assert.equal(loop.requests.length, 6);
  });

  test('exactly maxRedirects hops still succeed', async () => {
    const chain = await serve((req, res) => {
      const n = Number(req.url!.slice(1));
      if (n < 2) res.writeHead(301, { location: `/${n + 1}` });
      res.end(`at ${n}`);
    });
    const res = await safeRequest({ method: 'GET', url: `${chain.origin}/0` }, policy({ allowPrivate: true, maxRedirects: 2 }));
    assert.equal(res.body, 'at 2');
  });

  test('a redirect to another scheme, or with credentials, is invalid_url', async () => {
    for (const location of ['ftp://example.com/file', 'file:///etc/passwd', 'http://user:pw@example.com/', 'javascript:alert(1)']) {
      const r = await serve((_req, res) => {
        res.writeHead(302, { location });
        res.end();
      });
      await refused(safeRequest({ method: 'GET', url: r.origin }, policy({ allowPrivate: true })), 'invalid_url');
    }
  });

  test('a 3xx without Location is returned as is', async () => {
    const s = await serve((_req, res) => {
      res.writeHead(304);
      res.end();
    });
    const res = await safeRequest({ method: 'GET', url: s.origin }, policy({ allowPrivate: true }));
    assert.equal(res.status, 304);
  });
});

describe('limits', () => {
  test('a server that never answers times out within about timeoutMs', async () => {
    const silent = await serve(() => undefined);
    const started = Date.now();
    await refused(safeRequest({ method: 'GET', url: silent.origin }, policy({ allowPrivate: true, timeoutMs: 300 })), 'timeout');
    const took = Date.now() - started;
    assert.ok(took >= 250 && took < 1500, `took ${took} ms`);
  });

  test('a name that never resolves times out too', async () => {
    const started = Date.now();
    const hang = () => new Promise<never>(() => undefined);
    await refused(safeRequest({ method: 'GET', url: 'http://slow-dns.test/' }, policy({ timeoutMs: 200 }), { lookup: hang }), 'timeout');
    const took = Date.now() - started;
    assert.ok(took >= 150 && took < 1500, `took ${took} ms`);
  });

  test('a body that trickles in forever hits the overall deadline', async () => {
    const drip = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      const timer = setInterval(() => res.write('.'), 50);
      res.on('close', () => clearInterval(timer));
    });
    const started = Date.now();
    await refused(safeRequest({ method: 'GET', url: drip.origin }, policy({ allowPrivate: true, timeoutMs: 400 })), 'timeout');
    const took = Date.now() - started;
    assert.ok(took >= 350 && took < 1500, `took ${took} ms`);
  });

  test('an endless response fails with too_large without being buffered', async () => {
    let sent = 0;
    const chunk = Buffer.alloc(64 * 1024, 'x');
    const endless = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      const pump = (): void => {
        while (!res.destroyed) {
          sent += chunk.length;
          if (!res.write(chunk)) {
            res.once('drain', pump);
            return;
          }
        }
      };
      res.on('error', () => undefined);
      pump();
    });
    const started = Date.now();
    const err = await refused(
      safeRequest({ method: 'GET', url: endless.origin }, policy({ allowPrivate: true, maxResponseBytes: 4096, timeoutMs: 5000 })),
      'too_large',
    );
    assert.match(err.message, /4096/);
    assert.ok(Date.now() - started < 2000);
    // The server did start streaming, and stopped once the client hung up.
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.ok(sent > 0);
    const after = sent;
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(sent, after, 'the server kept writing after the client gave up');
    assert.ok(sent < 32 * 1024 * 1024, `server pushed ${sent} bytes`);
  });

  test('a declared Content-Length over the limit fails before the body arrives', async () => {
    const big = await serve((_req, res) => {
      res.writeHead(200, { 'content-length': String(50 * 1024 * 1024) });
      res.write('x'); // then nothing: waiting for the body would time out
    });
    const started = Date.now();
    await refused(safeRequest({ method: 'GET', url: big.origin }, policy({ allowPrivate: true, maxResponseBytes: 1024, timeoutMs: 3000 })), 'too_large');
    assert.ok(Date.now() - started < 1000);
  });

  test('a body of exactly maxResponseBytes passes, one byte more does not', async () => {
    const sized = await serve((req, res) => res.end('y'.repeat(Number(req.url!.slice(1)))));
    const p = policy({ allowPrivate: true, maxResponseBytes: 1024 });
    const res = await safeRequest({ method: 'GET', url: `${sized.origin}/1024` }, p);
    assert.equal(res.body.length, 1024);
    await refused(safeRequest({ method: 'GET', url: `${sized.origin}/1025` }, p), 'too_large');
  });

  test('a refused connection is a network error', async () => {
    const gone = await serve(ok);
    const port = gone.port;
    await new Promise<void>((resolve) => gone.server.close(() => resolve()));
    opened.splice(opened.indexOf(gone), 1);
    await refused(safeRequest({ method: 'GET', url: `http://127.0.0.1:${port}/` }, policy({ allowPrivate: true })), 'network');
  });
});

describe('request shape', () => {
  test('invalid URLs are refused with invalid_url', async () => {
    for (const url of [
      'ftp://example.com/',
      'example.com/path',
      '//example.com/',
      '/relative',
      '',
      'http://',
      'http://user:pass@example.com/',
      'http://user@example.com/',
      'file:///etc/passwd',
      'javascript:alert(1)',
      'gopher://127.0.0.1:70/',
      'http://[::1/',
      'http://exa mple.com/',
    ]) {
      await refused(safeRequest({ method: 'GET', url }, policy({ allowPrivate: true })), 'invalid_url');
    }
  });

  test('bad methods and header injection are refused', async () => {
    const s = await serve(ok);
    await refused(safeRequest({ method: 'CONNECT', url: s.origin }, policy({ allowPrivate: true })), 'invalid_url');
    await refused(safeRequest({ method: 'TRACE', url: s.origin }, policy({ allowPrivate: true })), 'invalid_url');
    await refused(safeRequest({ method: 'GET', url: s.origin, headers: { 'x-a': 'v\r\nx-injected: 1' } }, policy({ allowPrivate: true })), 'invalid_url');
    await refused(safeRequest({ method: 'GET', url: s.origin, headers: { 'bad name': 'v' } }, policy({ allowPrivate: true })), 'invalid_url');
    assert.equal(s.connections, 0);
  });

  test("POST body and headers arrive as sent; Host and hop-by-hop headers are not the caller's", async () => {
    const echo = await serve((req, res, body) => {
      res.setHeader('content-type', 'application/json');
      res.setHeader('set-cookie', ['a=1', 'b=2']);
      res.statusCode = 201;
      res.end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers, body }));
    });
    const body = JSON.stringify({ name: 'Zoë', emoji: '🎉', n: 1 });
    const res = await safeRequest(
      {
        method: 'post',
        url: `${echo.origin}/hook?x=1&y=%20#fragment`,
        headers: {
          'Content-Type': 'application/json',
          'X-Custom': 'value with spaces',
          Authorization: 'Bearer abc',
          Host: 'evil.example',
          Connection: 'close, X-Drop-Me',
          'X-Drop-Me': 'hop',
          'Keep-Alive': 'timeout=5',
          'Transfer-Encoding': 'chunked',
          'Content-Length': '1',
          'Proxy-Authorization': 'Basic eA==',
          Upgrade: 'websocket',
          'User-Agent': 'spoofed',
        },
        body,
      },
      policy({ allowPrivate: true }),
    );
    assert.equal(res.status, 201);
    assert.equal(res.headers['content-type'], 'application/json');
    assert.equal(res.headers['set-cookie'], 'a=1, b=2');
    const seen = JSON.parse(res.body) as { method: string; url: string; headers: Record<string, string>; body: string };
    assert.equal(seen.method, 'POST');
    assert.equal(seen.url, '/hook?x=1&y=%20');
    assert.equal(seen.body, body);
    assert.equal(seen.headers['content-type'], 'application/json');
    assert.equal(seen.headers['x-custom'], 'value with spaces');
    assert.equal(seen.headers.authorization, 'Bearer abc');
    assert.equal(seen.headers.host, `127.0.0.1:${echo.port}`);
    assert.equal(seen.headers['user-agent'], 'svc-http/1');
    assert.equal(seen.headers['content-length'], String(Buffer.byteLength(body)));
    for (const h of ['x-drop-me', 'keep-alive', 'transfer-encoding', 'proxy-authorization', 'upgrade']) assert.equal(seen.headers[h], undefined, h);
  });

  test('HEAD sends no body and reads none', async () => {
    const s = await serve((_req, res, body) => {
      res.setHeader('x-body-length', String(body.length));
      res.end('ignored');
    });
    const res = await safeRequest({ method: 'HEAD', url: s.origin, body: 'nope' }, policy({ allowPrivate: true }));
    assert.equal(res.status, 200);
    assert.equal(res.body, '');
    assert.equal(res.headers['x-body-length'], '0');
  });
});
