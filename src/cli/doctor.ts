import type { Command } from 'commander';
import { runDoctor } from '../core/services/doctor.js';
import { configFlags, globals, output, table } from './io.js';

export function registerDoctor(program: Command): void {
  program
    .command('doctor')
    .description('check the data folder (permissions, disk, integrity, migrations, config, server) and say what to fix')
    .action(async (_opts: unknown, cmd: Command) => {
      const report = await runDoctor(globals(cmd).dataDir, process.env, configFlags(cmd).databaseUrl);
      output(cmd, report, () => {
        const out = [
          table(
            report.checks.map((c) => ({ check: c.name, status: c.status, detail: c.detail })),
            ['check', 'status', 'detail'],
          ),
        ];
        const fixes = report.checks.filter((c) => c.status !== 'OK' && c.fix);
        if (fixes.length) out.push('', 'what to do:', ...fixes.map((c) => `  ${c.status} ${c.name}: ${c.fix}`));
        return out.join('\n');
      });
      const failed = report.checks.filter((c) => c.status === 'FAIL');
      if (failed.length) {
        process.stderr.write(`error: ${failed.length} check(s) failed: ${failed.map((c) => c.name).join(', ')}\n`);
        process.exitCode = 1;
      }
    });
}
