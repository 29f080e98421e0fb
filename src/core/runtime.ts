import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, lstatSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir, userInfo } from 'node:os';
import { dirname, join } from 'node:path';
import * as sea from 'node:sea';
import { isMainThread } from 'node:worker_threads';

/**
 * Where svc runs: from the npm install (a bundle beside node_modules) or as one executable
 * file (a Node single executable application built by build-exe.mjs). Everything that
 * differs between the two is here; elsewhere it is one call (`isExecutable()`,
 * `embeddedFiles()`, `extractedFile()`), and the npm install takes the same paths as before.
 *
 * The executable carries its files as SEA assets. What Node can only take from disk (the
 * SQLite native addon, the worker threads' scripts, the migrations read by path) is written
 * once to a private cache folder, `$XDG_CACHE_HOME/svc/<build>` (else `~/.cache/svc/<build>`),
 * mode 0700, and each file's SHA-256 is checked against the hash build-exe.mjs recorded
 * before anything is loaded from it: a file that does not match is written again.
 */

/** What build-exe.mjs records in the asset `manifest.json`. */
export interface ExeManifest {
  version: string;
  /** A hash of everything below: names the cache folder of this build. */
  build: string;
  /** Files to extract, by their path under the cache folder, with their SHA-256 (hex). */
  extract: Record<string, string>;
  /** Embedded files served from memory, by asset name (e.g. "console/index.html"). */
  embedded: string[];
}

/** True inside the single executable (its main thread and its worker threads). */
export function isExecutable(): boolean {
  return sea.isSea();
}

/** An asset of the executable, or undefined (not in the executable, or no such asset). */
export function asset(name: string): Buffer | undefined {
  if (!isExecutable()) return undefined;
  try {
    return Buffer.from(sea.getRawAsset(name) as ArrayBuffer);
  } catch {
    return undefined;
  }
}

let manifestCache: ExeManifest | undefined;

export function exeManifest(): ExeManifest {
  if (!manifestCache) {
    const raw = asset('manifest.json');
    if (!raw) throw new Error('this executable carries no manifest.json; rebuild it with `npm run build:exe`');
    manifestCache = JSON.parse(raw.toString('utf8')) as ExeManifest;
  }
  return manifestCache;
}

/**
 * The embedded files under a prefix ("console"), by their path below it, or undefined when
 * not running as the executable (read the files from disk then). An empty map: the
 * executable was built without them.
 */
export function embeddedFiles(prefix: string): Map<string, Buffer> | undefined {
  if (!isExecutable()) return undefined;
  const files = new Map<string, Buffer>();
  const head = `${prefix}/`;
  for (const name of exeManifest().embedded) {
    if (!name.startsWith(head)) continue;
    const body = asset(name);
    if (body) files.set(name.slice(head.length), body);
  }
  return files;
}

/** The base of the private cache: $XDG_CACHE_HOME/svc, else ~/.cache/svc (else the temp folder). */
export function cacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  const xdg = env.XDG_CACHE_HOME;
  if (xdg?.startsWith('/')) return join(xdg, 'svc');
  let home = env.HOME;
  if (!home) {
    try {
      home = homedir();
    } catch {
      home = '';
    }
  }
  if (home) return join(home, '.cache', 'svc');
  return join(tmpdir(), `svc-cache-${userInfo().uid}`);
}

const sha256 = (data: Buffer): string => createHash('sha256').update(data).digest('hex');

/** Creates a folder (and missing parents) and makes sure it is a real folder of ours, 0700. */
function privateFolder(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = lstatSync(dir);
  if (!st.isDirectory()) throw new Error(`${dir} is not a folder`);
  if (typeof process.getuid === 'function' && st.uid !== process.getuid()) {
    throw new Error(`the cache folder ${dir} belongs to another user; set XDG_CACHE_HOME to a folder of yours`);
  }
  if ((st.mode & 0o077) !== 0) chmodSync(dir, 0o700);
}

/**
 * Writes a file whole under a temporary name, then renames it over the old one, so that a
 * process starting meanwhile never loads half a file. No fsync: after a crash, a file that
 * lost its contents fails its hash at the next start and is written again.
 */
function writeAtomically(path: string, data: Buffer, mode: number): void {
  const partial = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.part`;
  writeFileSync(partial, data, { mode, flag: 'wx' });
  try {
    renameSync(partial, path);
  } catch (err) {
    rmSync(partial, { force: true });
    throw err;
  }
}

function matches(path: string, hash: string): boolean {
  try {
    return lstatSync(path).isFile() && sha256(readFileSync(path)) === hash;
  } catch {
    return false;
  }
}

export interface ExtractReport {
  dir: string;
  /** Files written this time (missing, or not matching their recorded hash). */
  written: string[];
}

let extractedDir: string | undefined;

/**
 * Makes sure every file the executable must have on disk is in the cache folder with the
 * hash recorded at build time, writing those that are missing or differ. Done once per
 * process on the main thread; worker threads are started after it and trust it.
 */
export function extractFiles(root = cacheRoot()): ExtractReport {
  const manifest = exeManifest();
  const dir = join(root, manifest.build);
  privateFolder(root);
  privateFolder(dir);
  const written: string[] = [];
  for (const [name, hash] of Object.entries(manifest.extract)) {
    const path = join(dir, name);
    if (matches(path, hash)) continue;
    const data = asset(`extract/${name}`);
    if (!data || sha256(data) !== hash) throw new Error(`the executable's copy of ${name} is damaged; download or build it again`);
    privateFolder(dirname(path));
    writeAtomically(path, data, 0o600);
    if (!matches(path, hash)) throw new Error(`could not write ${path} intact`);
    written.push(name);
  }
  extractedDir = dir;
  return { dir, written };
}

/** The cache folder holding the extracted files (extracting them on first use in the main thread). */
export function extractedFolder(): string {
  if (!extractedDir) {
    const root = cacheRoot();
    if (!isMainThread) extractedDir = join(root, exeManifest().build);
    else {
      try {
        extractedDir = extractFiles(root).dir;
      } catch (err) {
        throw new Error(`svc could not prepare its cache folder ${root} (${(err as Error).message}); set XDG_CACHE_HOME to a private, writable folder`);
      }
    }
  }
  return extractedDir;
}

/** An extracted file by its path under the cache folder ("worker.js", "migrations"). */
export function extractedFile(name: string): string {
  return join(extractedFolder(), name);
}

let addon: unknown;

/**
 * The better-sqlite3 native addon of the executable, loaded from the cache folder after its
 * hash was checked. build-exe.mjs points better-sqlite3's binding loader here, so every
 * `new Database()` of the executable (main thread, engine threads, backup thread) uses it.
 */
export function nativeSqliteAddon(): unknown {
  if (!addon) {
    const module = { exports: {} as unknown };
    const file = extractedFile('better_sqlite3.node');
    try {
      process.dlopen(module, file);
    } catch (err) {
      // Typically a cache folder on a file system mounted noexec.
      throw new Error(
        `svc could not load its SQLite addon ${file} (${(err as Error).message}); set XDG_CACHE_HOME to a folder on a file system that allows executables`,
      );
    }
    addon = module.exports;
  }
  return addon;
}
