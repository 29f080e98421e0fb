// The baseline of the webhook benchmark: a bare Fastify route on the same machine that
// parses the same JSON body and answers 202. Started as its own process by bench/run.ts.
import Fastify from 'fastify';

const app = Fastify({ logger: false });
app.post('/bare', async (req, reply) => {
  const body = req.body as { data?: { object?: { customer_details?: { email?: string } } } };
  if (!body?.data?.object?.customer_details?.email) return reply.code(422).send({ error: 'no email' });
  return reply.code(202).send({ runId: 1, contactId: 1 });
});
const address = await app.listen({ host: '127.0.0.1', port: Number(process.argv[2] ?? 0) });
process.stdout.write(`listening ${address}\n`);
process.on('SIGTERM', () => void app.close().then(() => process.exit(0)));
