import { randomUUID } from 'node:crypto';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { problem, SECURITY_HEADERS } from './plugins/errors.js';

/**
 * A request whose body stops arriving is cut off: when no byte has come for the body timeout
 * (`bodyTimeoutSeconds`, 30 s) while the request is still incomplete, it is answered 408
 * `request_timeout` (when nothing has been answered yet) and its connection closed. A client
 * trickling a body, or one that stalled mid-upload, can no longer hold a socket (and, for an
 * import, its job) open for as long as it likes; an upload of any size that keeps moving is
 * never cut, however long it takes. Headers are bounded by Node's own `headersTimeout`.
 *
 * Built on the socket's idle timeout, which Node keeps per connection at no cost per request.
 * The server's own time is not counted: a request whose body has fully arrived (the server
 * working on it, or a client reading a long export slowly) is left alone, and so is one whose
 * socket svc itself paused because it is not reading yet (backpressure). A socket idle between
 * requests is closed, as Node does without this (keepAliveTimeout).
 */
export function cutOffStalledBodies(server: Server, timeoutMs: number, requestId: (req: IncomingMessage) => string): void {
  server.timeout = timeoutMs;
  server.on('timeout', (socket: Socket) => {
    const res = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
    const req: IncomingMessage | undefined = res?.req;
    if (req && !req.complete) {
      if (socket.isPaused()) return;
      answerTimeout(socket, res!, requestId(req));
      return;
    }
    // A response under way: the request is complete, the time is the server's or the reader's.
    if (res && !res.writableEnded) return;
    socket.destroy();
  });
}

const BODY = JSON.stringify(problem(408, 'request_timeout', 'No part of the request body arrived for too long; send it again'));

/** 408 as a problem, written on the socket itself (the request's handler may still hold the response), then closed. */
function answerTimeout(socket: Socket, res: ServerResponse, id: string): void {
  if (res.headersSent || socket.destroyed) {
    socket.destroy();
    return;
  }
  // Whatever the handler writes after this goes nowhere: the socket is closed once this is out.
  writeProblem(socket, 'HTTP/1.1 408 Request Timeout', BODY, id);
}

/** A problem written on the socket as a whole response, then the connection closed. */
function writeProblem(socket: Socket, statusLine: string, body: string, id: string): void {
  const head = [
    statusLine,
    'Content-Type: application/problem+json; charset=utf-8',
    `Content-Length: ${Buffer.byteLength(body)}`,
    'Connection: close',
    'Cache-Control: no-store',
    `X-Request-Id: ${id}`,
    ...Object.entries(SECURITY_HEADERS).map(([name, value]) => `${name}: ${value}`),
  ].join('\r\n');
  socket.write(`${head}\r\n\r\n${body}`, () => socket.destroy());
}

const CLIENT_ERRORS = {
  431: ['HTTP/1.1 431 Request Header Fields Too Large', JSON.stringify(problem(431, 'headers_too_large', 'The request headers are too large'))],
  408: ['HTTP/1.1 408 Request Timeout', JSON.stringify(problem(408, 'request_timeout', 'The request headers did not arrive in time'))],
  400: [
    'HTTP/1.1 400 Bad Request',
    JSON.stringify(problem(400, 'bad_request', 'The request is not valid HTTP/1.1 (its request line, a header, or its framing)')),
  ],
} as const;

/**
 * What a request Node's HTTP parser refused gets (Fastify's clientErrorHandler): malformed
 * framing (Content-Length with Transfer-Encoding, a bad chunk), an invalid header, headers
 * too large or too slow. A problem like every other error, where Node and Fastify would write
 * their own JSON; nothing when the client is gone or a response is already under way.
 */
export function answerClientError(err: NodeJS.ErrnoException, socket: Socket): void {
  const res = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (err.code === 'ECONNRESET' || err.code === 'EPIPE' || socket.destroyed || !socket.writable || res?.headersSent) {
    socket.destroy();
    return;
  }
  const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
  const [statusLine, body] = CLIENT_ERRORS[status];
  writeProblem(socket, statusLine, body, randomUUID());
}
