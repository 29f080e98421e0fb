import { isUtf8 } from 'node:buffer';
import { hostname, userInfo } from 'node:os';
import type { Command } from 'commander';
import { loadConfig, type Config, type ConfigFlags } from '../core/config.js';
import { openCurrentStore } from '../core/bootstrap.js';
import type { Actor, SystemContext, WorkspaceContext } from '../core/context.js';
import type { Db } from '../core/db/connection.js';
import type { Store } from '../core/db/store.js';
import { serverHolders } from '../core/serverLock.js';
import type { Page } from '../core/pagination.js';

export interface GlobalOptions {
  dataDir?: string;
  databaseUrl?: string;
  redisUrl?: string;
  json?: boolean;
}

/** The configuration flags every command shares (data folder, database). */
export function configFlags(cmd: Command): ConfigFlags {
  const g = globals(cmd);
  return {
    ...(g.dataDir ? { dataDir: g.dataDir } : {}),
    ...(g.databaseUrl ? { databaseUrl: g.databaseUrl } : {}),
    ...(g.redisUrl ? { redisUrl: g.redisUrl } : {}),
  };
}

export function globals(cmd: Command): GlobalOptions {
  return cmd.optsWithGlobals() as GlobalOptions;
}

/** An error whose message is meant for the operator as it stands. */
export class CliError extends Error {}

export function cliActor(): Actor {
  let label = 'cli';
  try {
    label = `cli:${userInfo().username}`;
  } catch {
    // no passwd entry (some containers): keep the generic label
  }
  return { type: 'CLI', id: null, label };
}

export interface CliSession {
  config: Config;
  db: Db;
  store: Store;
  ctx: SystemContext;
  inWorkspace(workspaceId: number): WorkspaceContext;
  close(): Promise<void>;
}

/**
 * Without a configured public URL, the URLs the CLI prints (a webhook's, a sandbox's) name the
 * address of the server running on this data folder, as the API does: `svc serve --port 0` or
 * `--port 4000` listens elsewhere than the 3000 this process would make up (its pid file says
 * where; several servers at different addresses leave it as it was).
 */
function withRunningServerUrl(config: Config): Config {
  if (config.publicUrlConfigured) return config;
  const here = hostname();
  const urls = new Set(
    serverHolders(config.dataDir)
      .live.filter((h) => h.hostname === here && h.publicUrl)
      .map((h) => h.publicUrl!),
  );
  if (urls.size !== 1) return config;
  const url = [...urls][0]!;
  return { ...config, publicUrl: url, ...(config.sandboxUrlConfigured ? {} : { sandboxUrl: url }) };
}

export async function openSession(cmd: Command, env: NodeJS.ProcessEnv = process.env): Promise<CliSession> {
  const config = withRunningServerUrl(loadConfig(configFlags(cmd), env));
  const store = await openCurrentStore(config);
  const ctx: SystemContext = { db: store.db, store, config, actor: cliActor(), ip: null };
  return { config, db: store.db, store, ctx, inWorkspace: (workspaceId) => ({ ...ctx, workspaceId }), close: () => store.close() };
}

/** Runs fn with an open session and always closes the database afterwards. */
export async function withSession<T>(cmd: Command, fn: (s: CliSession) => T | Promise<T>): Promise<T> {
  const session = await openSession(cmd);
  try {
    return await fn(session);
  } finally {
    await session.close();
  }
}

export function parseId(value: string, what = 'id'): number {
  // A safe integer: 9007199254740993 would be read as ...992, another id than the one typed.
  if (!/^[1-9][0-9]{0,15}$/.test(value.trim()) || !Number.isSafeInteger(Number(value.trim())))
    throw new CliError(`${what} must be a positive integer up to 2^53-1, got "${printable(value)}"`);
  return Number(value.trim());
}

/** Prints one JSON document for scripts, or the human text. */
export function output(cmd: Command, json: unknown, human: string | (() => string)): void {
  if (globals(cmd).json) process.stdout.write(`${JSON.stringify(json, null, 2)}\n`);
  else process.stdout.write(`${typeof human === 'function' ? human() : human}\n`);
}

/**
 * Text for a terminal: control characters (C0, DEL, C1) shown as escapes, `\n`, `\x1b`. A name
 * set through the API by a lower role (a workflow's, a key's) could otherwise clear the
 * operator's screen, retitle the terminal or forge a row of a table.
 */
export function printable(text: string): string {
  let out = '';
  let from = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0x20 && c !== 0x7f && (c < 0x80 || c > 0x9f)) continue;
    out += text.slice(from, i) + (c === 0x0a ? '\\n' : c === 0x09 ? '\\t' : c === 0x0d ? '\\r' : `\\x${c.toString(16).padStart(2, '0')}`);
    from = i + 1;
  }
  return from === 0 ? text : out + text.slice(from);
}

export function table(rows: Record<string, unknown>[], columns: string[]): string {
  if (!rows.length) return '(none)';
  const cell = (v: unknown) => (v === null || v === undefined ? '-' : printable(String(v)));
  const widths = columns.map((c) => Math.max(c.length, ...rows.map((r) => cell(r[c]).length)));
  const line = (values: string[]) =>
    values
      .map((v, i) => v.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [line(columns.map((c) => c.toUpperCase())), ...rows.map((r) => line(columns.map((c) => cell(r[c]))))].join('\n');
}

async function readStdinBytes(): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

export async function readStdin(): Promise<string> {
  return (await readStdinBytes()).toString('utf8');
}

/** A secret from standard input: only the final line break is removed. It must be UTF-8 text (as a login's JSON is). */
export async function readSecretFromStdin(): Promise<string> {
  const bytes = await readStdinBytes();
  if (!isUtf8(bytes)) throw new CliError('the password on standard input is not UTF-8 text');
  const text = bytes.toString('utf8').replace(/\r?\n$/, '');
  if (!text) throw new CliError('no password on standard input');
  return text;
}

/** Prompts only on a terminal, and never with --yes or --json (a script reads --json output). */
export function interactive(opts: { yes?: boolean | undefined; json?: boolean | undefined }): boolean {
  return !opts.yes && !opts.json && !!process.stdin.isTTY && !!process.stdout.isTTY;
}

/** Every page of a listing, for commands that print the whole list. */
export async function allPages<T>(fetch: (cursor: string | undefined) => Promise<Page<T>>, max = 10_000): Promise<T[]> {
  const items: T[] = [];
  let cursor: string | undefined;
  do {
    const page = await fetch(cursor);
    items.push(...page.data);
    cursor = page.nextCursor ?? undefined;
  } while (cursor && items.length < max);
  return items;
}
