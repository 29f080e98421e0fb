import { request as httpRequest } from 'node:http';
import type { HttpResult, TestServer } from './helpers.js';

/** A request with a chosen Host header (fetch always sends the URL's), as a proxy in front of svc would forward it. */
export function viaHost(s: TestServer, host: string, method: string, path: string, opts: { token?: string; body?: unknown } = {}): Promise<HttpResult> {
  const url = new URL(s.url);
  const payload = opts.body === undefined ? undefined : JSON.stringify(opts.body);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        method,
        path,
        headers: {
          host,
          ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
          ...(payload ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {}),
        },
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => {
          let body: unknown;
          try {
            body = text ? JSON.parse(text) : undefined;
          } catch {
            body = undefined;
          }
          resolve({ status: res.statusCode!, headers: new Headers(res.headers as Record<string, string>), body, text });
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/**
 * POSTs a JSON body to a minted webhook URL on the test server, with the URL's own host in
 * the Host header: a sandbox URL (SVC_SANDBOX_URL) names a host that only a proxy would map
 * to the server, so the request goes to the server's socket with that Host, as a proxy sends it.
 */
export function postToMintedUrl(s: TestServer, url: string, body: unknown): Promise<HttpResult> {
  const u = new URL(url);
  return viaHost(s, u.host, 'POST', u.pathname, { body });
}
