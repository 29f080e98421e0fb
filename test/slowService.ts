import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TestContext } from 'node:test';

/**
 * A local HTTP service that answers every call after a delay, as a CRM or SMS API would,
 * and keeps count: calls per `?key=` (a run id, say), calls in progress, the most at once.
 */
export interface SlowService {
  /** host:port, for SVC_HTTP_ALLOWED_HOSTS. */
  host: string;
  url: string;
  calls: Map<string, number>;
  total(): number;
  inProgress(): number;
  maxInProgress(): number;
  /** Resolves once this many calls are in progress at the same time. */
  whenInProgress(n: number): Promise<void>;
  /** Resolves once this many calls have been received in all. */
  whenReceived(n: number): Promise<void>;
}

export async function slowService(t: TestContext, delayMs: number): Promise<SlowService> {
  const calls = new Map<string, number>();
  let current = 0;
  let most = 0;
  let received = 0;
  const waiters: { test: () => boolean; resolve: () => void }[] = [];
  const check = () => {
    for (const w of [...waiters]) {
      if (w.test()) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    }
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const key = new URL(req.url ?? '/', 'http://x').searchParams.get('key') ?? '';
    calls.set(key, (calls.get(key) ?? 0) + 1);
    received++;
    current++;
    most = Math.max(most, current);
    check();
    req.resume();
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      current--;
    };
    res.on('close', finish);
    setTimeout(() => {
      res.end('{"ok":true}');
      finish();
    }, delayMs).unref();
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => {
    server.closeAllConnections();
    return new Promise<void>((r) => server.close(() => r()));
  });
  const host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  // A wait that cannot be met fails the test with what was seen instead of hanging it.
  const wait = (test: () => boolean, what: string) =>
    new Promise<void>((resolve, reject) => {
      if (test()) return resolve();
      const timer = setTimeout(() => {
        waiters.splice(waiters.indexOf(waiter), 1);
        reject(new Error(`timed out after 60 s waiting for ${what}: ${current} in progress (at most ${most}), ${received} received`));
      }, 60_000);
      const waiter = {
        test,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      };
      waiters.push(waiter);
    });
  return {
    host,
    url: `http://${host}/call`,
    calls,
    total: () => [...calls.values()].reduce((a, b) => a + b, 0),
    inProgress: () => current,
    maxInProgress: () => most,
    whenInProgress: (n) => wait(() => current >= n, `${n} calls in progress`),
    whenReceived: (n) => wait(() => received >= n, `${n} calls received`),
  };
}
