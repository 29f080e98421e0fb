// Builds the web console (src/console) into dist/console: index.html, and under assets/ the
// JavaScript and CSS with content hashes in their names (served with a year's cache). The
// graph editor (React Flow) is a chunk of its own, loaded when a page needs it.
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The login page may load at most this much JavaScript, gzipped (issue 11). */
export const LOGIN_JS_BUDGET = 250 * 1024;

const kb = (n) => `${(n / 1024).toFixed(1)} KB`;

/**
 * Builds the console. `clean` empties the output folder first (the full build does; the
 * tests' helper does not, so that two test files building at once never see it empty).
 * Returns the gzipped size of the JavaScript the login page loads.
 */
export async function buildConsole({ outdir = join(ROOT, 'dist', 'console'), clean = true, quiet = false } = {}) {
  if (clean) rmSync(outdir, { recursive: true, force: true });
  mkdirSync(outdir, { recursive: true });
  const assets = join(outdir, 'assets');
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: { main: 'src/console/main.tsx' },
    outdir: assets,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'browser',
    target: ['es2022', 'chrome111', 'firefox115', 'safari16.4'],
    entryNames: '[name]-[hash]',
    chunkNames: '[name]-[hash]',
    assetNames: '[name]-[hash]',
    publicPath: '/app/assets/',
    minify: true,
    legalComments: 'none',
    jsx: 'automatic',
    tsconfig: 'src/console/tsconfig.json',
    define: { 'process.env.NODE_ENV': '"production"' },
    metafile: true,
    logLevel: 'warning',
  });

  const outputs = result.metafile.outputs;
  const name = (path) => relative(assets, join(ROOT, path)).split('\\').join('/');
  const entry = Object.keys(outputs).find((path) => outputs[path].entryPoint === 'src/console/main.tsx' && path.endsWith('.js'));
  if (!entry) throw new Error('the console build produced no entry script');
  const css = outputs[entry].cssBundle;

  // What the first page loads: the entry and the chunks it imports statically, not the
  // ones behind import() (the editor).
  const loaded = new Set();
  const visit = (path) => {
    if (loaded.has(path)) return;
    loaded.add(path);
    for (const imp of outputs[path].imports) if (imp.kind === 'import-statement' && !imp.external) visit(imp.path);
  };
  visit(entry);
  const gzipped = [...loaded].reduce((sum, path) => sum + gzipSync(readFileSync(join(ROOT, path)), { level: 9 }).length, 0);
  const cssGzipped = css ? gzipSync(readFileSync(join(ROOT, css)), { level: 9 }).length : 0;

  const preloads = [...loaded].filter((p) => p !== entry).map((p) => `<link rel="modulepreload" href="/app/assets/${name(p)}">`);
  const html = readFileSync(join(ROOT, 'src', 'console', 'index.html'), 'utf8').replace(
    '<!-- assets -->',
    [
      ...(css ? [`<link rel="stylesheet" href="/app/assets/${name(css)}">`] : []),
      ...preloads,
      `<script type="module" src="/app/assets/${name(entry)}"></script>`,
    ].join('\n    '),
  );
  // Written last, and whole (a rename): a server that finds index.html finds the files it names.
  writeFileSync(join(outdir, `index.html.${process.pid}`), html);
  renameSync(join(outdir, `index.html.${process.pid}`), join(outdir, 'index.html'));

  if (!quiet) {
    const over = gzipped > LOGIN_JS_BUDGET ? ` — OVER the ${kb(LOGIN_JS_BUDGET)} budget` : ` (budget ${kb(LOGIN_JS_BUDGET)})`;
    console.log(`built dist/console: the login page loads ${kb(gzipped)} of JavaScript gzipped${over}, ${kb(cssGzipped)} of CSS`);
  }
  if (gzipped > LOGIN_JS_BUDGET) throw new Error(`the console's login page loads ${kb(gzipped)} of JavaScript gzipped, over the ${kb(LOGIN_JS_BUDGET)} budget`);
  return { loginJsGzip: gzipped, cssGzip: cssGzipped, files: Object.keys(outputs).map(name) };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await buildConsole();
