// Bundles the program with esbuild into dist/: svc.js (CLI and server) and worker.js (the
// run engine's worker threads).
// better-sqlite3 stays external (a native addon); migrations are copied beside the bundle.
import { cpSync, readFileSync, rmSync } from 'node:fs';
import { build } from 'esbuild';

const pkg = JSON.parse(readFileSync(new URL('./package.json', import.meta.url), 'utf8'));

rmSync('dist', { recursive: true, force: true });
await build({
  entryPoints: { svc: 'src/cli/entry.ts', worker: 'src/engine/worker.ts' },
  outdir: 'dist',
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  sourcemap: 'linked',
  external: ['better-sqlite3'],
  define: { SVC_VERSION: JSON.stringify(pkg.version) },
  // Bundled CommonJS dependencies call require(); give the ESM bundle one.
  banner: { js: "import { createRequire as __svcCreateRequire } from 'node:module'; const require = __svcCreateRequire(import.meta.url);" },
  logLevel: 'warning',
});
cpSync('migrations', 'dist/migrations', { recursive: true });
console.log('built dist/svc.js and dist/worker.js');
