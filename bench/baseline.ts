// The build that `npm run bench` measures this one against, side by side in one run (issue 12:
// the move to the async data path must not cost SQLite more than 10% of webhook CPU, nor drop
// engine throughput below 4,000 runs/s). It is the commit tagged `bench-baseline-sqlite`, the
// last one before the data path turned async; a clone without tags falls back to its hash.
// It is checked out once into a cache folder with `git archive`, installed with `npm ci` and
// built, then reused by later runs. BENCH_BASELINE=none measures this build alone; another
// commit-ish measures against that one.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const TAG = 'bench-baseline-sqlite';
const TAG_COMMIT = '03e5de4798a6b34f981ccd6da9d927da14eaee85';

export interface Baseline {
  /** The checkout's root: run its `bin/svc`. */
  dir: string;
  /** What it is, for the report: the name asked for and its short hash. */
  label: string;
}

function git(args: string[]): string {
  return execFileSync('git', args, { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
}

function resolve(name: string): string | undefined {
  try {
    return git(['rev-parse', '--verify', '--quiet', `${name}^{commit}`]);
  } catch {
    return undefined;
  }
}

/** The built baseline, or undefined when BENCH_BASELINE=none. Prints its progress on stderr. */
export function prepareBaseline(): Baseline | undefined {
  const wanted = process.env.BENCH_BASELINE ?? TAG;
  if (wanted === 'none') return undefined;
  const commit = resolve(wanted) ?? (wanted === TAG ? resolve(TAG_COMMIT) : undefined);
  if (!commit) throw new Error(`the benchmark's baseline ${wanted} is not a commit of this clone (BENCH_BASELINE=none measures this build alone)`);
  const dir = join(root, 'node_modules', '.cache', 'svc-bench-baseline', commit);
  const ready = join(dir, '.bench-ready');
  if (!existsSync(ready)) {
    process.stderr.write(`baseline ${wanted} (${commit.slice(0, 7)}): checking out, installing and building in ${dir} (once)\n`);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    execFileSync('bash', ['-c', `git archive ${commit} | tar -x -C "${dir}"`], { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });
    // npm ci builds it too (the package's prepare script).
    execFileSync('npm', ['ci', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: dir, stdio: ['ignore', 'ignore', 'inherit'] });
    writeFileSync(ready, `${commit}\n`);
  }
  return { dir, label: `${wanted} (${commit.slice(0, 7)})` };
}
