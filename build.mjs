// Bundles the program with esbuild into dist/: svc.js (CLI and server) and worker.js (the
// run engine's worker threads), and the web console into dist/console (src/console/build.mjs).
// Migrations are copied beside the bundle.
import { cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { build } from 'esbuild';
import { buildConsole } from './src/console/build.mjs';

const pkg = JSON.parse(readFileSync(new URL('./package.json', import.meta.url), 'utf8'));

/**
 * `import ... from 'node:http'` in an ES module makes Node build the module's ES facade,
 * which reads every export, and so the lazy ones too: `WebSocket` and its events load and
 * compile Node's internal undici (about 9 MB of RSS and 2.6 MB of heap in each thread: the
 * main thread and every engine thread) in a program that never uses them. Bundled ES
 * modules (nodemailer's, our own) that import it get it through require() instead, as the
 * bundled CommonJS packages already do; esbuild's interop reads an export only when used.
 */
const builtinsAsCommonJs = {
  name: 'builtins-as-commonjs',
  setup(b) {
    b.onResolve({ filter: /^(node:)?https?$/ }, (args) =>
      args.kind === 'import-statement' ? { path: args.path.startsWith('node:') ? args.path : `node:${args.path}`, namespace: 'builtin-cjs' } : undefined,
    );
    b.onLoad({ filter: /.*/, namespace: 'builtin-cjs' }, (args) => ({ contents: `module.exports = require(${JSON.stringify(args.path)});`, loader: 'js' }));
  },
};

/**
 * libphonenumber-js builds `new RegExp('^(?:' + pattern + ')$')` from its metadata's pattern
 * text on every check (helpers/matchesEntirely.js), several times for each number it parses
 * and validates: for a number of a calling code several countries share (+1: the US, Canada and
 * 23 more), once per type pattern of each country it tries. The patterns are a fixed set, the
 * metadata's; compiled once and kept, a number costs about half as much (an import of phone
 * numbers spends more of its time there than anywhere else but SQLite). The expressions have
 * no `g` or `y` flag, so `test` keeps no state between calls. Same signature, same answers:
 * test/cli/contacts.test.ts compares the bundle's normalisation with the library's own. The
 * build fails if the file is not found (a later version that moved or renamed it).
 */
const phonePatternsCompiledOnce = {
  name: 'phone-patterns-compiled-once',
  setup(b) {
    let replaced = false;
    b.onLoad({ filter: /[\\/]libphonenumber-js[\\/]es6[\\/]helpers[\\/]matchesEntirely\.js$/ }, () => {
      replaced = true;
      const contents = [
        'const compiled = new Map();',
        'export default function matchesEntirely(text, regularExpressionText) {',
        "  text = text || '';",
        '  let expression = compiled.get(regularExpressionText);',
        '  if (expression === undefined) {',
        "    expression = new RegExp('^(?:' + regularExpressionText + ')$');",
        '    compiled.set(regularExpressionText, expression);',
        '  }',
        '  return expression.test(text);',
        '}',
      ];
      return { contents: contents.join('\n'), loader: 'js' };
    });
    b.onEnd((result) => {
      if (!replaced && !result.errors.length) throw new Error('libphonenumber-js/es6/helpers/matchesEntirely.js was not bundled (phonePatternsCompiledOnce)');
    });
  },
};

rmSync('dist', { recursive: true, force: true });
await build({
  entryPoints: { svc: 'src/cli/entry.ts', worker: 'src/engine/worker.ts' },
  outdir: 'dist',
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node22',
  sourcemap: 'linked',
  // V8 keeps a bundle's source text in memory for as long as the program runs (it compiles
  // functions lazily from it), once per thread. Without whitespace and comments it is 4.8 MB
  // instead of 7.0 (svc.js) and 1.7 instead of 2.5 (worker.js). Names stay as written, so
  // stack traces still name their functions; NODE_OPTIONS=--enable-source-maps maps their
  // lines to the sources (the .map files beside the bundles).
  minifyWhitespace: true,
  // Native addons and packages that locate their own files at run time stay in node_modules
  // (piscina starts its worker wrapper from beside its own module); pg's optional native
  // binding (pg-native) is only loaded through pg.native, which svc never uses.
  external: ['better-sqlite3', 'piscina', 'pg-native'],
  define: { SVC_VERSION: JSON.stringify(pkg.version) },
  // Bundled CommonJS dependencies call require(); give the ESM bundle one.
  banner: {
    js: [
      "import { createRequire as __svcCreateRequire } from 'node:module';",
      "import { fileURLToPath as __svcFileURLToPath } from 'node:url';",
      "import { dirname as __svcDirname } from 'node:path';",
      'const require = __svcCreateRequire(import.meta.url);',
      'const __filename = __svcFileURLToPath(import.meta.url);',
      'const __dirname = __svcDirname(__filename);',
    ].join(' '),
  },
  logLevel: 'warning',
  plugins: [builtinsAsCommonJs, phonePatternsCompiledOnce],
});
// V8 holds a source text as Latin-1 when every character is, and as UTF-16, twice the size,
// as soon as one is not (before, a dash in a dependency's comment did it to svc.js).
// esbuild writes every string, regular expression and identifier as ASCII (its
// default charset), so any other character left is in a comment it keeps (a licence): each
// UTF-16 unit of one becomes '?', which keeps every line and column, and so the source maps.
for (const file of ['dist/svc.js', 'dist/worker.js']) {
  const text = readFileSync(file, 'utf8');
  writeFileSync(file, text.replace(/[\u0080-\uffff]/g, '?'));
}
cpSync('migrations', 'dist/migrations', { recursive: true });
// The API reference page at /docs (Swagger UI), served from the bundle so it works offline.
for (const file of ['swagger-ui.css', 'swagger-ui-bundle.js']) cpSync(`node_modules/swagger-ui-dist/${file}`, `dist/docs/${file}`);
console.log('built dist/svc.js and dist/worker.js');
await buildConsole();
