// Builds svc as one executable file, dist/svc-<platform>-<arch>: a Node single executable
// application (Node's --experimental-sea-config, then postject) made from the Node that the
// `node` package pins (24), not the Node running this script. Inside, as SEA assets:
//   - the CLI and server, bundled as CommonJS (the main script; src/cli/exe.ts);
//   - to be written to the private cache folder at start (src/core/runtime.ts): the
//     better-sqlite3 native addon, the engine's worker thread script, Piscina's worker
//     wrapper, better-sqlite3 for the backup thread, and the migrations;
//   - served from memory: the /docs files (swagger-ui-dist) and the web console.
// Every dependency is bundled; nothing is read from node_modules at run time.
//
// Usage: node build-exe.mjs   (npm run build:exe). SVC_EXE_STRIP=0 keeps the debug symbols of
// the Node binary (about 18 MB); SVC_EXE_OUT names the output file.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const ROOT = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
const RUNTIME = join(ROOT, 'src', 'core', 'runtime.ts');
const started = Date.now();

const sha256 = (data) => createHash('sha256').update(data).digest('hex');
const mb = (n) => `${(n / 1024 / 1024).toFixed(1)} MiB`;

/** Runs a tool quietly; its output is shown only when it fails. */
function run(file, args) {
  try {
    execFileSync(file, args, { stdio: 'pipe' });
  } catch (err) {
    process.stderr.write(`${err.stdout ?? ''}${err.stderr ?? ''}`);
    throw new Error(`${file} ${args.join(' ')} failed`);
  }
}

/** The Node binary to embed: the `node` package's (24), which must also make the blob. */
function nodeBinary() {
  let candidate;
  try {
    candidate = join(dirname(require.resolve('node/package.json')), 'bin', process.platform === 'win32' ? 'node.exe' : 'node');
  } catch {
    candidate = process.execPath;
  }
  if (!existsSync(candidate)) candidate = process.execPath;
  const version = execFileSync(candidate, ['--version'], { encoding: 'utf8' }).trim();
  const major = Number(version.slice(1).split('.')[0]);
  if (major < 24) throw new Error(`${candidate} is Node ${version}; the executable needs Node 24 (the \`node\` package: run npm ci)`);
  return { path: candidate, version };
}

/** The better-sqlite3 addon this machine loads (the prebuilt binary for its platform). */
function sqliteAddon() {
  const dir = dirname(require.resolve('better-sqlite3/package.json'));
  const { getPrebuildPath } = require(join(dir, 'lib', 'binding.js'));
  for (const path of [join(dir, 'build', 'Release', 'better_sqlite3.node'), getPrebuildPath()]) {
    if (path && existsSync(path)) return path;
  }
  throw new Error(`no better-sqlite3 native addon for ${process.platform}-${process.arch} in ${dir}`);
}

/**
 * better-sqlite3 finds its addon beside its own files; in the executable it comes from the
 * cache folder instead, checked against its hash (runtime.ts nativeSqliteAddon). Piscina
 * starts its worker wrapper from beside its own module; in the executable that wrapper is
 * an extracted file too. Both rewrites fail the build if the code they replace moved.
 */
const exePlugin = {
  name: 'svc-exe',
  setup(b) {
    b.onLoad({ filter: /[\\/]better-sqlite3[\\/]lib[\\/]binding\.js$/ }, () => ({
      loader: 'js',
      contents: `'use strict';
const path = require('path');
const { nativeSqliteAddon } = require(${JSON.stringify(RUNTIME)});
exports.getBinding = function getBinding(nativeBinding) {
  if (typeof nativeBinding === 'object' && nativeBinding !== null) return nativeBinding;
  if (typeof nativeBinding === 'string') {
    const module = { exports: {} };
    process.dlopen(module, path.resolve(nativeBinding).replace(/(\\.node)?$/, '.node'));
    return module.exports;
  }
  return nativeSqliteAddon();
};
exports.getPrebuildPath = function getPrebuildPath() { return null; };
`,
      resolveDir: dirname(RUNTIME),
    }));
    b.onLoad({ filter: /[\\/]piscina[\\/]dist[\\/]index\.js$/ }, (args) => {
      const source = readFileSync(args.path, 'utf8');
      const wrapper = "(0, node_path_1.resolve)(__dirname, 'worker.js')";
      if (source.split(wrapper).length !== 2) throw new Error(`piscina changed: "${wrapper}" is not in ${args.path} exactly once; update build-exe.mjs`);
      return {
        loader: 'js',
        contents: source.replace(wrapper, `require(${JSON.stringify(RUNTIME)}).extractedFile('piscina-worker.js')`),
        resolveDir: dirname(args.path),
      };
    });
  },
};

/** esbuild options shared by every script of the executable. */
const common = {
  absWorkingDir: ROOT,
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node24',
  minifyWhitespace: true,
  minifySyntax: true,
  legalComments: 'none',
  define: { SVC_VERSION: JSON.stringify(pkg.version), 'import.meta.url': '__svc_import_meta_url' },
  // The sources are ESM and use import.meta.url; in CommonJS it is the script's own file.
  banner: { js: 'var __svc_import_meta_url = require("node:url").pathToFileURL(__filename).href;' },
  plugins: [exePlugin],
  // Piscina's optional thread-priority addon, only loaded (and its absence caught) for niceIncrement, unused here.
  // pg's optional native binding (pg-native) is loaded only through pg.native, which svc never uses.
  external: ['@napi-rs/nice', 'pg-native'],
  logLevel: 'warning',
  write: false,
};

async function bundle(options) {
  const result = await build({ ...common, ...options });
  if (result.outputFiles.length !== 1) throw new Error('expected one output file');
  return Buffer.from(result.outputFiles[0].contents);
}

/** Every file under a folder, by its path relative to it with forward slashes. */
function walk(dir, base = dir, out = []) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = join(dir, entry.name);
    if (entry.isDirectory()) walk(full, base, out);
    else if (entry.isFile()) out.push(relative(base, full).split(sep).join('/'));
  }
  return out;
}

/** The web console, freshly built into the staging folder (never touching dist/console). */
async function consoleFiles(stage) {
  const outdir = join(stage, 'console');
  try {
    const { buildConsole } = await import('./src/console/build.mjs');
    await buildConsole({ outdir, clean: true, quiet: true });
  } catch (err) {
    const built = join(ROOT, 'dist', 'console');
    if (!existsSync(join(built, 'index.html'))) {
      console.warn(`warning: the console did not build (${err.message}); the executable will have none`);
      return new Map();
    }
    console.warn(`warning: the console did not build (${err.message}); using dist/console`);
    return new Map(walk(built).map((p) => [p, readFileSync(join(built, p))]));
  }
  return new Map(walk(outdir).map((p) => [p, readFileSync(join(outdir, p))]));
}

const node = nodeBinary();
const target = `${process.platform}-${process.arch}`;
const out = resolve(ROOT, process.env.SVC_EXE_OUT ?? join('dist', `svc-${target}${process.platform === 'win32' ? '.exe' : ''}`));
const stage = mkdtempSync(join(tmpdir(), 'svc-exe-'));
try {
  // Files written to the cache folder at start, and files served from memory.
  const extract = new Map();
  const embedded = new Map();
  const [main, worker, piscinaWorker, sqliteDriver] = await Promise.all([
    bundle({ entryPoints: ['src/cli/exe.ts'] }),
    bundle({ entryPoints: ['src/engine/worker.ts'] }),
    bundle({ entryPoints: [join(dirname(require.resolve('piscina')), 'worker.js')] }),
    bundle({ stdin: { contents: "module.exports = require('better-sqlite3');", resolveDir: ROOT, loader: 'js' } }),
  ]);
  extract.set('better_sqlite3.node', readFileSync(sqliteAddon()));
  extract.set('worker.js', worker);
  extract.set('piscina-worker.js', piscinaWorker);
  extract.set('sqlite-driver.js', sqliteDriver);
  // SQLite's migrations, and PostgreSQL's in migrations/pg.
  for (const sub of ['', 'pg/']) {
    extract.set(`migrations/${sub}meta/_journal.json`, readFileSync(join(ROOT, 'migrations', sub, 'meta', '_journal.json')));
    for (const file of readdirSync(join(ROOT, 'migrations', sub)).filter((f) => f.endsWith('.sql'))) {
      extract.set(`migrations/${sub}${file}`, readFileSync(join(ROOT, 'migrations', sub, file)));
    }
  }
  const docs = dirname(require.resolve('swagger-ui-dist/package.json'));
  for (const file of ['swagger-ui.css', 'swagger-ui-bundle.js']) embedded.set(`docs/${file}`, readFileSync(join(docs, file)));
  const consoleBuilt = await consoleFiles(stage);
  for (const [path, body] of consoleBuilt) embedded.set(`console/${path}`, body);

  const hashes = Object.fromEntries([...extract].map(([name, data]) => [name, sha256(data)]));
  const manifest = {
    version: pkg.version,
    build: '',
    extract: hashes,
    embedded: [...embedded.keys()],
  };
  manifest.build = sha256(JSON.stringify([pkg.version, node.version, hashes, [...embedded].map(([name, data]) => [name, sha256(data)])])).slice(0, 16);

  // The assets, each written to the staging folder under a flat name.
  const assets = {};
  const put = (name, data) => {
    const file = join(stage, 'assets', name.replaceAll('/', '__'));
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, data);
    assets[name] = file;
  };
  put('manifest.json', JSON.stringify(manifest));
  for (const [name, data] of extract) put(`extract/${name}`, data);
  for (const [name, data] of embedded) put(name, data);
  writeFileSync(join(stage, 'svc.cjs'), main);

  const blob = join(stage, 'sea-prep.blob');
  writeFileSync(
    join(stage, 'sea-config.json'),
    // No copy of V8's builtins per thread (short builtin calls), as bin/svc runs serve: see there.
    JSON.stringify({
      main: join(stage, 'svc.cjs'),
      output: blob,
      disableExperimentalSEAWarning: true,
      useCodeCache: true,
      execArgv: ['--no-short-builtin-calls'],
      assets,
    }),
  );
  // The code cache is made under the flags the executable runs with (V8 rejects, with a
  // warning on every start, a cache made under other flags).
  run(node.path, ['--no-short-builtin-calls', '--experimental-sea-config', join(stage, 'sea-config.json')]);

  // The executable: a copy of that Node, without its debug symbols, with the blob injected.
  const exe = join(stage, 'svc');
  copyFileSync(node.path, exe);
  chmodSync(exe, 0o755);
  if (process.platform === 'linux' && process.env.SVC_EXE_STRIP !== '0') {
    try {
      execFileSync('strip', [exe], { stdio: 'ignore' });
    } catch {
      console.warn('warning: `strip` is not available; the executable keeps the debug symbols of Node');
    }
  }
  if (process.platform === 'darwin') execFileSync('codesign', ['--remove-signature', exe]);
  // postject's command line, so that its harmless ELF-notes warnings stay out of the output.
  const postject = [join(dirname(require.resolve('postject')), 'cli.js'), exe, 'NODE_SEA_BLOB', blob];
  postject.push('--sentinel-fuse', 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2');
  if (process.platform === 'darwin') postject.push('--macho-segment-name', 'NODE_SEA');
  run(process.execPath, postject);
  if (process.platform === 'darwin') execFileSync('codesign', ['--sign', '-', exe]);

  mkdirSync(dirname(out), { recursive: true });
  copyFileSync(exe, `${out}.part`);
  chmodSync(`${out}.part`, 0o755);
  renameSync(`${out}.part`, out);
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  console.log(
    `built ${out.startsWith(ROOT + sep) ? relative(ROOT, out) : out} (${mb(statSync(out).size)}; Node ${node.version}; build ${manifest.build}; ` +
      `${consoleBuilt.size ? `console ${consoleBuilt.size} files` : 'no console'}) in ${seconds} s`,
  );
} finally {
  rmSync(stage, { recursive: true, force: true });
}
