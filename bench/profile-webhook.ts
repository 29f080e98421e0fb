// npm run bench:profile: a CPU profile (--cpu-prof) of an ingest-only node under webhook load,
// the path issue 9 asks to make cheaper. BENCH_CHECKOUT profiles another built checkout (the
// baseline's, say); the .cpuprofile goes to PROFILE_DIR (default: the system's temp folder).
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { load, startWebhookNode, stop, WEBHOOK_BODY, WEBHOOK_SIGNATURE } from './lib.js';

const dir = process.env.PROFILE_DIR ?? tmpdir();
const node = await startWebhookNode({
  engine: false,
  ...(process.env.BENCH_CHECKOUT ? { checkout: process.env.BENCH_CHECKOUT } : {}),
  nodeFlags: ['--cpu-prof', `--cpu-prof-dir=${dir}`],
});
try {
  const r = await load({
    url: node.url,
    body: WEBHOOK_BODY,
    headers: { 'content-type': 'application/json', 'x-service-signature': WEBHOOK_SIGNATURE },
    seconds: Number(process.env.BENCH_SECONDS ?? 10),
    connections: 50,
  });
  console.log(`${r.rps} req/s, non-2xx ${r.non2xx}; the profile is written to ${dir} when the server stops`);
} finally {
  await stop(node.child);
  rmSync(node.dataDir, { recursive: true, force: true });
}
