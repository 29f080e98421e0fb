const SAMPLE_VALUES = { email: 'ann@example.com', phone: '+14155550100', contactId: 1 };

/** A sample body with the lookup value where the workflow reads it ("customer.email" nests). */
export function sampleBody(lookup: keyof typeof SAMPLE_VALUES | null, path: string | null): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  const segments = (path ?? lookup ?? 'email').split('.');
  let at = body;
  segments.forEach((segment, i) => {
    if (i === segments.length - 1) {
      at[segment] = SAMPLE_VALUES[lookup ?? 'email'];
      return;
    }
    const inner: Record<string, unknown> = {};
    at[segment] = inner;
    at = inner;
  });
  return { ...body, total: 120 };
}

/** Ready-to-paste requests for the webhook URL: shell (curl + openssl) and Node. */
export function SigningExamples({
  url,
  signed,
  lookup,
  path,
}: {
  url: string;
  signed: boolean;
  lookup: keyof typeof SAMPLE_VALUES | null;
  path: string | null;
}) {
  const sample = sampleBody(lookup, path);
  const body = JSON.stringify(sample);
  const shell = signed
    ? `BODY='${body}'
SIG="sha256=$(printf '%s' "$BODY" | openssl dgst -sha256 -hmac "$SVC_SIGNING_SECRET" -hex | sed 's/^.* //')"
curl -X POST '${url}' \\
  -H 'content-type: application/json' \\
  -H "x-service-signature: $SIG" \\
  --data "$BODY"`
    : `curl -X POST '${url}' \\
  -H 'content-type: application/json' \\
  --data '${body}'`;
  const node = `import { createHmac } from 'node:crypto';

const body = JSON.stringify(${JSON.stringify(sample)});
const headers = { 'content-type': 'application/json' };${
    signed
      ? `
headers['x-service-signature'] = 'sha256=' + createHmac('sha256', process.env.SVC_SIGNING_SECRET).update(body).digest('hex');`
      : ''
  }
const res = await fetch('${url}', { method: 'POST', headers, body });
console.log(res.status, await res.json());`;
  return (
    <details className="examples">
      <summary>Examples: send a test request</summary>
      <h3>Shell</h3>
      <pre>
        <code>{shell}</code>
      </pre>
      <h3>Node</h3>
      <pre>
        <code>{node}</code>
      </pre>
    </details>
  );
}
