// Smoke test of the built program, run by .ci/run against `bin/svc serve`: log in, create a
// template and an active webhook workflow, POST a webhook, and wait until the run executed
// in the bundled worker threads is COMPLETED with its email recorded by the outbox.
const [base, email, password] = process.argv.slice(2);

async function call(method, path, body, token) {
  const res = await fetch(base + path, {
    method,
    headers: { ...(body ? { 'content-type': 'application/json' } : {}), ...(token ? { authorization: `Bearer ${token}` } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

const { token } = await call('POST', '/auth/login', { email, password });
const template = await call('POST', '/templates', { name: 'smoke', channel: 'EMAIL', content: { subject: 'Hi {{ trigger.name }}', text: 'hello' } }, token);
const wf = await call(
  'POST',
  '/workflows',
  {
    name: 'smoke',
    triggerSource: 'WEBHOOK',
    status: 'ACTIVE',
    steps: [{ type: 'send_email', templateId: template.id }, { type: 'add_tags', tags: ['smoke'] }],
    webhook: { lookup: 'email', createIfNotFound: true },
  },
  token,
);
const { runId } = await call('POST', new URL(wf.webhook.url).pathname, { email: 'smoke-contact@example.com', name: 'Smoke' });
for (let i = 0; i < 100; i++) {
  const run = await call('GET', `/runs/${runId}`, undefined, token);
  if (run.status === 'COMPLETED') {
    const attempts = await call('GET', `/messages/delivery-attempts?runId=${runId}`, undefined, token);
    if (attempts.data[0]?.rendered?.subject !== 'Hi Smoke') throw new Error(`unexpected delivery: ${JSON.stringify(attempts)}`);
    console.log(`smoke: run ${runId} COMPLETED, email rendered "${attempts.data[0].rendered.subject}"`);
    process.exit(0);
  }
  if (run.status === 'FAILED') throw new Error(`run failed: ${JSON.stringify(run)}`);
  await new Promise((r) => setTimeout(r, 100));
}
throw new Error('the run did not complete within 10 s');
