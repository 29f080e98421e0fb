import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { connect } from 'node:net';
import { networkInterfaces } from 'node:os';

/** One sample of a parsed metric family (histograms carry buckets, count and sum instead). */
export interface Sample {
  value?: string;
  labels?: Record<string, string>;
  buckets?: Record<string, string>;
  count?: string;
  sum?: string;
}

export interface Family {
  name: string;
  help: string;
  type: 'COUNTER' | 'GAUGE' | 'HISTOGRAM' | 'SUMMARY' | 'UNTYPED';
  metrics: Sample[];
}

/** parse-prometheus-text-format ships no types; this is the part the tests use. */
const parse = createRequire(import.meta.url)('parse-prometheus-text-format') as (text: string) => Family[];

/** The families of a Prometheus text exposition, by name. */
export function parseMetrics(text: string): Map<string, Family> {
  return new Map(parse(text).map((f) => [f.name, f]));
}

/** The value of the sample of `name` whose labels include `labels` (0 when there is none). */
export function sampleValue(families: Map<string, Family>, name: string, labels: Record<string, string> = {}): number {
  const family = families.get(name);
  if (!family) throw new Error(`no metric ${name}`);
  const sample = family.metrics.find((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v));
  if (!sample) return 0;
  return Number(sample.value ?? sample.count);
}

/** The port answers on no address of this machine but loopback (a metrics listener on 127.0.0.1). */
export async function assertLoopbackOnly(port: number): Promise<void> {
  const others = Object.values(networkInterfaces())
    .flat()
    .filter((i) => i && !i.internal && i.family === 'IPv4');
  for (const i of others) {
    const refused = await new Promise<boolean>((resolve) => {
      const socket = connect({ host: i!.address, port }, () => {
        socket.destroy();
        resolve(false);
      });
      socket.on('error', () => resolve(true));
    });
    assert.ok(refused, `the metrics port does not answer on ${i!.address}`);
  }
}
