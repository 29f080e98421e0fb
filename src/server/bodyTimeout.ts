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
 * socket svc itself paused because it is not reading yet (backpressure: an import whose batch
 * waits on the database), checked again a timeout later for as long as the pause lasts, and
 * one whose next bytes are waiting unread because svc's own thread was busy. That
 * holds after an early answer too (an import's 202, uploadAnsweredEarly), when Node no longer
 * ties the socket to the request. A socket idle between requests is closed, as Node does
 * without this (keepAliveTimeout).
 */
export function cutOffStalledBodies(server: Server, timeoutMs: number, requestId: (req: IncomingMessage) => string): void {
  server.timeout = timeoutMs;
  server.on('timeout', (socket: Socket) => {
    const res = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
    const req: IncomingMessage | undefined = res?.req ?? answeredEarly.get(socket);
    if (req && !req.complete && !req.destroyed) {
      if (socket.isPaused()) {
        // The wait is svc's; the timer has fired and nothing read will refresh it: re-armed,
        // so that a client which stops sending once svc reads again is still cut.
        socket.setTimeout(timeoutMs);
        return;
      }
      // A timer overdue because svc itself was busy (a long synchronous write) finds the body's
      // next bytes waiting in the kernel: one turn of the event loop reads them before the
      // client is judged.
      const read = socket.bytesRead;
      setImmediate(() => {
        if (socket.destroyed || req.complete) return;
        if (socket.bytesRead !== read || socket.isPaused()) socket.setTimeout(timeoutMs);
        else if (res) answerTimeout(socket, res, requestId(req));
        else socket.destroy();
      });
      return;
    }
    // A response under way: the request is complete, the time is the server's or the reader's.
    if (res && !res.writableEnded) return;
    socket.destroy();
  });
}

/** The uploads still arriving after their answer went out (Node has detached the socket from them). */
const answeredEarly = new WeakMap<Socket, IncomingMessage>();

/**
 * A request answered before its body has all arrived (an import's 202) keeps the body timeout
 * for the rest of its upload: Node gives the socket the keep-alive timeout once the answer is
 * out, and no longer says which request it is reading.
 */
export function uploadAnsweredEarly(req: IncomingMessage, res: ServerResponse, timeoutMs: number): void {
  const socket = req.socket;
  res.once('finish', () => {
    if (req.complete || socket.destroyed) return;
    answeredEarly.set(socket, req);
    socket.setTimeout(timeoutMs);
  });
}

/**
 * On shutdown, the connections with no request under way are closed, now and every quarter
 * second until the server has stopped: Node's idle ones (kept alive between requests, a
 * request that finishes meanwhile included), and those that have sent nothing at all, which
 * Node's closeIdleConnections leaves open. A browser opens such a connection ahead of need (a
 * preconnect), and `svc serve` waited the whole grace period for it. A connection halfway
 * through a request's head is left to finish it (it is answered 503 shutting_down). Returns
 * the function that stops the sweep.
 */
export function closeConnectionsWithoutRequest(server: Server): () => void {
  const sweep = () => {
    server.closeIdleConnections();
    for (const socket of sockets.get(server) ?? []) if (socket.bytesRead === 0) socket.destroy();
  };
  sweep();
  const timer = setInterval(sweep, 250);
  timer.unref();
  return () => clearInterval(timer);
}

/** Each server's open connections, kept from the moment the server is made (trackConnections). */
const sockets = new WeakMap<Server, Set<Socket>>();

export function trackConnections(server: Server): void {
  const open = new Set<Socket>();
  sockets.set(server, open);
  server.on('connection', (socket: Socket) => {
    open.add(socket);
    socket.once('close', () => open.delete(socket));
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
  // An upload answered early (an import's 202) has had its answer: a second one on the same
  // connection (its chunks' framing broken after the 202) would be a response to no request.
  const early = answeredEarly.get(socket);
  if (
    err.code === 'ECONNRESET' ||
    err.code === 'EPIPE' ||
    socket.destroyed ||
    !socket.writable ||
    res?.headersSent ||
    (early !== undefined && !early.complete)
  ) {
    socket.destroy();
    return;
  }
  const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
  const [statusLine, body] = CLIENT_ERRORS[status];
  writeProblem(socket, statusLine, body, randomUUID());
}
