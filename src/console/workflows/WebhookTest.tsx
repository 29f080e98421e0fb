import { useMutation } from '@tanstack/react-query';
import { useState, type FormEvent } from 'react';
import { api, describeError } from '../api/client';
import { Alert } from '../ui/Alert';
import { TextAreaField } from '../ui/Field';
import { sampleBody } from './SigningExamples';

/** A dry run of the webhook: what the lookup finds for a pasted body. Nothing is written. */
export function WebhookTest({ workflowId, lookup, path }: { workflowId: number; lookup: Parameters<typeof sampleBody>[0]; path: string | null }) {
  // A body with a sample value where the lookup reads it.
  const [text, setText] = useState(() => JSON.stringify(sampleBody(lookup, path), null, 2));
  const [parseError, setParseError] = useState<string | undefined>();
  const test = useMutation({ mutationFn: (body: unknown) => api('post', '/workflows/{id}/webhook/test', { params: { id: workflowId }, body: { body } }) });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      setParseError('Not valid JSON');
      return;
    }
    setParseError(undefined);
    test.mutate(body);
  };
  const r = test.data;
  return (
    <section className="card" aria-labelledby="test-heading">
      <h2 id="test-heading">Test payload</h2>
      <form onSubmit={submit} noValidate aria-label="Test payload">
        <TextAreaField label="Body (JSON)" className="code" value={text} onChange={(e) => setText(e.target.value)} error={parseError} rows={5} />
        <button type="submit" className="button-secondary" disabled={test.isPending}>
          Test
        </button>
      </form>
      {test.error ? <Alert>{describeError(test.error)}</Alert> : null}
      {r && (
        <div aria-live="polite" className="test-result">
          <Alert kind={r.wouldAccept ? 'success' : 'error'}>
            {r.wouldAccept
              ? `A real POST would be accepted (${r.status}).`
              : `A real POST would be refused: ${r.status} ${r.code ?? ''}${r.detail ? ` — ${r.detail}` : ''}`}
          </Alert>
          <dl className="facts">
            <dt>Lookup</dt>
            <dd>{r.lookup ? `${r.lookup.kind} at ${r.lookup.path}: ${String(r.lookup.value)}` : '—'}</dd>
            <dt>Contact</dt>
            <dd>
              {r.contact
                ? r.contact.outcome === 'existing'
                  ? `Contact ${r.contact.id} (${r.contact.email ?? r.contact.phone ?? ''})`
                  : r.contact.outcome === 'created'
                    ? `A new contact would be created (${r.contact.email ?? r.contact.phone ?? ''})`
                    : 'No contact matches'
                : '—'}
            </dd>
            <dt>Signature</dt>
            <dd>{r.signatureRequired ? `Required in the ${r.signatureHeader} header` : 'Not required (no secret set)'}</dd>
            {!r.active && (
              <>
                <dt>Status</dt>
                <dd>The workflow is not active: real posts answer 404 until it is activated.</dd>
              </>
            )}
          </dl>
        </div>
      )}
    </section>
  );
}
