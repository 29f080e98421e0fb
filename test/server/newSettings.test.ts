/**
 * The settings this wave added: their defaults, and a clear ConfigError (naming the
 * setting) for a value of the wrong type or out of range, from the environment.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, loadConfig, type Config } from '../../src/core/config.js';
import { build } from '../helpers.js';

const SETTINGS: { env: string; key: keyof Config; default: number; bad: string[] }[] = [
  { env: 'SVC_RUN_CONCURRENCY', key: 'runConcurrency', default: 1000, bad: ['0', '100001', 'many', '1.5'] },
  { env: 'SVC_WORKSPACE_CONCURRENCY', key: 'workspaceConcurrency', default: 500, bad: ['0', '-1', 'x'] },
  { env: 'SVC_SHUTDOWN_GRACE', key: 'shutdownGraceSeconds', default: 10, bad: ['-1', '3601', '10s'] },
  { env: 'SVC_OUTBOUND_PER_HOST_CONCURRENCY', key: 'outboundPerHostConcurrency', default: 256, bad: ['0', '10001', 'all'] },
  { env: 'SVC_RENDER_RATE_LIMIT', key: 'renderRateLimit', default: 60, bad: ['0', '1000001', 'none'] },
  { env: 'SVC_RUN_START_RATE_LIMIT', key: 'runStartRateLimit', default: 600, bad: ['0', '2.5', 'lots'] },
  { env: 'SVC_RUN_RETENTION_DAYS', key: 'runRetentionDays', default: 90, bad: ['-1', '36501', 'forever'] },
  { env: 'SVC_DELIVERY_RETENTION_DAYS', key: 'deliveryRetentionDays', default: 90, bad: ['-1', 'a week'] },
  { env: 'SVC_AUDIT_RETENTION_DAYS', key: 'auditRetentionDays', default: 400, bad: ['-5', '1e9'] },
  { env: 'SVC_SESSION_RETENTION_DAYS', key: 'sessionRetentionDays', default: 7, bad: ['-1', '3651'] },
  { env: 'SVC_HEAP_GROWTH', key: 'heapGrowthPercent', default: 50, bad: ['-1', '1001', '1.5x', 'half'] },
];

test('new settings: defaults, accepted values, and a ConfigError naming the setting for bad ones', async (t) => {
  const s = await build(t);
  for (const setting of SETTINGS) {
    assert.equal(s.config[setting.key], setting.default, `${setting.key} defaults to ${setting.default}`);
    assert.equal(loadConfig({ dataDir: s.dataDir }, { [setting.env]: '5' })[setting.key], 5, `${setting.env}=5 is taken`);
    for (const bad of setting.bad) {
      assert.throws(
        () => loadConfig({ dataDir: s.dataDir }, { [setting.env]: bad }),
        (err: unknown) => err instanceof ConfigError && String(err).includes(setting.key),
        `${setting.env}=${bad} is refused`,
      );
    }
  }
  // 0 keeps runs, attempts and audit entries for ever.
  const keep = loadConfig({ dataDir: s.dataDir }, { SVC_RUN_RETENTION_DAYS: '0', SVC_DELIVERY_RETENTION_DAYS: '0', SVC_AUDIT_RETENTION_DAYS: '0' });
  assert.deepEqual([keep.runRetentionDays, keep.deliveryRetentionDays, keep.auditRetentionDays], [0, 0, 0]);
});
