import { useMutation } from '@tanstack/react-query';
import { useEffect, useState, type FormEvent } from 'react';
import { api, describeError, fieldError } from '../api/client';
import { Alert } from '../ui/Alert';
import { ContactPicker } from '../ui/ContactPicker';
import { TextAreaField } from '../ui/Field';

const SAMPLE = '{\n  "total": 120\n}';

/** The saved template rendered for a chosen contact and a sample trigger body. */
export function TemplatePreview({ id, version }: { id: number; version: string }) {
  const [contactId, setContactId] = useState('');
  const [trigger, setTrigger] = useState(SAMPLE);
  const [jsonError, setJsonError] = useState<string | undefined>();
  const preview = useMutation({
    mutationFn: (body: { contactId?: number; trigger?: Record<string, unknown> }) => api('post', '/templates/{id}/preview', { params: { id }, body }),
  });
  const run = () => {
    let parsed: unknown;
    if (trigger.trim()) {
      try {
        parsed = JSON.parse(trigger);
      } catch {
        setJsonError('Not valid JSON');
        return;
      }
      if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
        setJsonError('Must be a JSON object');
        return;
      }
    }
    setJsonError(undefined);
    preview.mutate({ ...(contactId ? { contactId: Number(contactId) } : {}), ...(parsed ? { trigger: parsed as Record<string, unknown> } : {}) });
  };
  // The preview follows each save (and only then: not at each keystroke in the panel).
  // biome-ignore lint/correctness/useExhaustiveDependencies: run reads the panel's current values
  useEffect(() => run(), [version]);
  const submit = (e: FormEvent) => {
    e.preventDefault();
    run();
  };
  const rendered = preview.data?.rendered as Record<string, unknown> | undefined;
  return (
    <section className="card preview" aria-labelledby="preview-heading">
      <h2 id="preview-heading">Preview</h2>
      <form onSubmit={submit} noValidate aria-label="Preview settings">
        <ContactPicker value={contactId} onChange={setContactId} noneLabel="No contact" />
        <TextAreaField
          label="Trigger body (JSON)"
          value={trigger}
          onChange={(e) => setTrigger(e.target.value)}
          error={jsonError ?? fieldError(preview.error, '/trigger')}
          rows={4}
          className="code"
        />
        <button type="submit" className="button-secondary" disabled={preview.isPending}>
          Preview
        </button>
      </form>
      {preview.error && !fieldError(preview.error, '/trigger') ? <Alert>{describeError(preview.error)}</Alert> : null}
      {rendered && (
        <dl className="rendered" aria-live="polite">
          {Object.entries(rendered).map(([key, value]) => (
            <div key={key}>
              <dt>{key}</dt>
              <dd>
                {key === 'html' ? (
                  <iframe title="HTML preview" sandbox="" srcDoc={String(value)} />
                ) : (
                  <pre>{Array.isArray(value) ? value.join('\n') : String(value)}</pre>
                )}
              </dd>
            </div>
          ))}
        </dl>
      )}
    </section>
  );
}
