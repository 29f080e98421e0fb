import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { createSecureContext, createServer as createTlsServer } from 'node:tls';

/**
 * A TLS server on 127.0.0.1 with a self-signed certificate for `name` (made by openssl,
 * which the test machines have: a missing openssl fails the test, it is not skipped). It
 * records the server name (SNI) of every ClientHello; closed after the test.
 */
export async function sniServer(t: TestContext, name: string): Promise<{ port: number; seen: string[] }> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-tls-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', `/CN=${name}`, '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')],
    {
      stdio: 'ignore',
    },
  );
  const key = readFileSync(join(dir, 'key.pem'));
  const cert = readFileSync(join(dir, 'cert.pem'));
  const seen: string[] = [];
  const server = createTlsServer({
    key,
    cert,
    // Called with the ClientHello's server name, before the client rejects the certificate.
    SNICallback: (servername, cb) => {
      seen.push(servername);
      cb(null, createSecureContext({ key, cert }));
    },
  });
  server.on('tlsClientError', () => undefined);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { port: (server.address() as AddressInfo).port, seen };
}
