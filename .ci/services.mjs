// CI: the suite runs on PostgreSQL and Redis too, so under CI=true both must answer; a
// missing one fails the run here, with the command that starts it, instead of tests skipping.
import net from 'node:net';
import pg from 'pg';

const databaseUrl = process.env.SVC_TEST_DATABASE_URL;
const redisUrl = new URL(process.env.SVC_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379');
const problems = [];

try {
  const client = new pg.Client({ connectionString: databaseUrl, connectionTimeoutMillis: 5000 });
  await client.connect();
  const { rows } = await client.query('SHOW server_version');
  await client.end();
  console.log(`PostgreSQL ${rows[0].server_version} at ${new URL(databaseUrl).host}: ok`);
} catch (err) {
  problems.push(
    `PostgreSQL at ${databaseUrl} did not answer (${err.message}); start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`,
  );
}

const pong = await new Promise((resolve) => {
  const socket = net.connect(Number(redisUrl.port || 6379), redisUrl.hostname);
  const timer = setTimeout(() => socket.destroy(new Error('timed out')), 5000);
  socket.on('connect', () => socket.write('PING\r\n'));
  socket.on('data', (data) => {
    clearTimeout(timer);
    socket.end();
    resolve(data.toString().startsWith('+PONG') ? null : `answered ${JSON.stringify(data.toString())}`);
  });
  socket.on('error', (err) => {
    clearTimeout(timer);
    resolve(err.message);
  });
});
if (pong === null) console.log(`Redis at ${redisUrl.host}: ok`);
else
  problems.push(
    `Redis at ${redisUrl.host} did not answer PING (${pong}); start it with: redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log`,
  );

for (const p of problems) console.error(p);
process.exit(problems.length ? 1 : 0);
