import type { AddressInfo } from 'node:net';
import type { TestContext } from 'node:test';
import { SMTPServer } from 'smtp-server';
import { closeSmtpTransports } from '../src/engine/providers/smtp.js';

export interface SinkMail {
  to: string[];
  raw: string;
}

/**
 * A real SMTP server on 127.0.0.1 (no TLS, no AUTH) that keeps every message it receives.
 * `reply` may refuse a message after reading it (an Error with a responseCode). Closed
 * after the test, cutting the pooled connections of the server under test at once.
 */
export async function smtpSink(
  t: TestContext,
  reply: (mail: SinkMail) => Error | undefined = () => undefined,
): Promise<{ port: number; received: SinkMail[] }> {
  const received: SinkMail[] = [];
  const smtp = new SMTPServer({
    closeTimeout: 200,
    secure: false,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onData(stream, session, cb) {
      let raw = '';
      stream.on('data', (c: Buffer) => (raw += c.toString()));
      stream.on('end', () => {
        const mail = { to: session.envelope.rcptTo.map((r) => r.address), raw };
        received.push(mail);
        cb(reply(mail) ?? null);
      });
    },
  });
  // A client that goes away mid-session (a node killed under load) resets its connection:
  // the server reports it here, and an unheard 'error' would end the test process.
  smtp.on('error', () => undefined);
  await new Promise<void>((r) => smtp.listen(0, '127.0.0.1', r));
  t.after(async () => {
    closeSmtpTransports();
    await new Promise<void>((r) => smtp.close(() => r()));
  });
  return { port: (smtp.server.address() as AddressInfo).port, received };
}
