import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useEffect, useState, type FormEvent } from 'react';
import { Link } from 'wouter';
import { api, ApiError, describeError, fieldError, type BodyOf, type ResultOf } from '../api/client';
import { useCan } from '../app/session';
import { Alert, ErrorAlert } from '../ui/Alert';
import { ConfirmButton } from '../ui/ConfirmButton';
import { CopyField } from '../ui/CopyField';
import { Field, SelectField, TextAreaField } from '../ui/Field';
import { Page } from '../ui/Page';
import { StatusBadge } from '../ui/StatusBadge';
import { SigningExamples } from './SigningExamples';
import { WebhookEvents } from './WebhookEvents';
import { WebhookTest } from './WebhookTest';

type Workflow = ResultOf<'/workflows/{id}', 'get'>;
type Lookup = 'email' | 'phone' | 'contactId';

/** A workflow: status, steps, its webhook (lookup, secret, URL, examples, test, received events). */
export function WorkflowDetail({ id }: { id: number }) {
  const canWrite = useCan('MEMBER');
  const queries = useQueryClient();
  const workflow = useQuery({ queryKey: ['workflow', id], queryFn: () => api('get', '/workflows/{id}', { params: { id } }) });
  const update = useMutation({
    mutationFn: (body: BodyOf<'/workflows/{id}', 'patch'>) => api('patch', '/workflows/{id}', { params: { id }, body }),
    onSuccess: (w) => {
      queries.setQueryData(['workflow', id], w);
      void queries.invalidateQueries({ queryKey: ['workflows'] });
    },
  });

  if (workflow.error) {
    return (
      <Page title="Workflow">
        <ErrorAlert error={workflow.error} />
        <Link href="/">Back to workflows</Link>
      </Page>
    );
  }
  const w = workflow.data;
  if (!w) return <p className="loading">Loading the workflow…</p>;
  const active = w.status === 'ACTIVE';
  return (
    <Page
      title={w.name}
      actions={
        canWrite && (
          <button
            type="button"
            className={active ? 'button-secondary' : 'button-primary'}
            disabled={update.isPending}
            onClick={() => update.mutate({ status: active ? 'PAUSED' : 'ACTIVE' })}
          >
            {active ? 'Pause' : 'Activate'}
          </button>
        )
      }
    >
      <p>
        <Link href="/">← All workflows</Link>
      </p>
      <p className="meta">
        <StatusBadge status={w.status} /> Trigger: {w.triggerSource.toLowerCase()} · {w.steps.length} step{w.steps.length === 1 ? '' : 's'}
      </p>
      {update.error ? <Alert>{describeError(update.error)}</Alert> : null}
      {w.triggerSource === 'WEBHOOK' && w.webhook.url && (
        <section className="card" aria-labelledby="url-heading">
          <h2 id="url-heading">Endpoint</h2>
          <CopyField label="Webhook URL" value={w.webhook.url} />
          <p className="hint">
            {w.webhook.hasSigningSecret ? 'Requests must be signed with the signing secret.' : 'No signing secret is set: anyone with this URL can post to it.'}
          </p>
          {canWrite && <SigningExamples url={w.webhook.url} signed={w.webhook.hasSigningSecret} lookup={w.webhook.lookup} path={w.webhook.path} />}
        </section>
      )}
      {w.triggerSource === 'WEBHOOK' && <WebhookSettings workflow={w} canWrite={canWrite} onSaved={(nw) => queries.setQueryData(['workflow', id], nw)} />}
      <StepsEditor workflow={w} canWrite={canWrite} onSaved={(nw) => queries.setQueryData(['workflow', id], nw)} />
      {w.triggerSource === 'WEBHOOK' && canWrite && <WebhookTest workflowId={id} />}
      {w.triggerSource === 'WEBHOOK' && <WebhookEvents workflowId={id} canWrite={canWrite} />}
    </Page>
  );
}

function WebhookSettings({ workflow, canWrite, onSaved }: { workflow: Workflow; canWrite: boolean; onSaved: (w: Workflow) => void }) {
  const hook = workflow.webhook;
  const [lookup, setLookup] = useState<Lookup | ''>(hook.lookup ?? '');
  const [path, setPath] = useState(hook.path ?? '');
  const [create, setCreate] = useState(hook.createIfNotFound);
  const [secret, setSecret] = useState('');
  const [saved, setSaved] = useState<string | null>(null);
  useEffect(() => {
    setLookup(hook.lookup ?? '');
    setPath(hook.path ?? '');
    setCreate(hook.createIfNotFound);
  }, [hook.lookup, hook.path, hook.createIfNotFound]);
  const save = useMutation({
    mutationFn: (webhook: Record<string, unknown>) => api('patch', '/workflows/{id}', { params: { id: workflow.id }, body: { webhook } }),
    onSuccess: (w, webhook) => {
      onSaved(w);
      setSecret('');
      setSaved('signingSecret' in webhook ? (webhook.signingSecret === null ? 'The signing secret is cleared.' : 'The signing secret is set.') : 'Saved.');
    },
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    setSaved(null);
    save.mutate({ lookup: lookup || null, path: path.trim() || null, createIfNotFound: create });
  };
  const at = (p: string) => fieldError(save.error, `/webhook/${p}`);
  return (
    <section className="card" aria-labelledby="webhook-heading">
      <h2 id="webhook-heading">Webhook settings</h2>
      <form onSubmit={submit} noValidate aria-label="Webhook settings">
        <fieldset disabled={!canWrite}>
          <legend className="visually-hidden">Webhook settings</legend>
          {save.error && !at('lookup') && !at('path') && !at('signingSecret') ? <Alert>{describeError(save.error)}</Alert> : null}
          {saved && <Alert kind="success">{saved}</Alert>}
          <div className="grid-2">
            <SelectField
              label="Contact lookup"
              value={lookup}
              onChange={(e) => setLookup(e.target.value as Lookup | '')}
              error={at('lookup')}
              options={[
                { value: '', label: 'None (required to activate)' },
                { value: 'email', label: 'By email' },
                { value: 'phone', label: 'By phone' },
                { value: 'contactId', label: 'By contact id' },
              ]}
            />
            <Field
              label="Path in the body"
              value={path}
              onChange={(e) => setPath(e.target.value)}
              error={at('path')}
              hint="e.g. email or customer.email; empty: the lookup's name"
            />
          </div>
          <div className="checkbox">
            <input id="create-if-not-found" type="checkbox" checked={create} onChange={(e) => setCreate(e.target.checked)} />
            <label htmlFor="create-if-not-found">Create the contact when none matches (email and phone lookups)</label>
          </div>
          {canWrite && (
            <button type="submit" className="button-primary" disabled={save.isPending}>
              Save webhook settings
            </button>
          )}
        </fieldset>
      </form>
      {canWrite && (
        <form
          className="inline-form secret-form"
          noValidate
          aria-label="Set the signing secret"
          onSubmit={(e) => {
            e.preventDefault();
            setSaved(null);
            save.mutate({ signingSecret: secret });
          }}
        >
          <Field
            label="Signing secret"
            type="password"
            autoComplete="new-password"
            value={secret}
            onChange={(e) => setSecret(e.target.value)}
            error={at('signingSecret')}
            hint={
              workflow.webhook.hasSigningSecret
                ? 'A secret is set; a new one replaces it at once.'
                : 'At least 16 characters. Senders sign each body with it (HMAC-SHA256).'
            }
          />
          <button type="submit" className="button-secondary" disabled={save.isPending || !secret}>
            {workflow.webhook.hasSigningSecret ? 'Rotate secret' : 'Set secret'}
          </button>
          {workflow.webhook.hasSigningSecret && (
            <ConfirmButton
              label="Clear secret"
              question="Clear the signing secret? Unsigned posts to this URL will then be accepted."
              onConfirm={() => save.mutateAsync({ signingSecret: null })}
            />
          )}
        </form>
      )}
    </section>
  );
}

/** The steps as JSON for now (the step-list editor comes next); 422 pointers are shown with it. */
function StepsEditor({ workflow, canWrite, onSaved }: { workflow: Workflow; canWrite: boolean; onSaved: (w: Workflow) => void }) {
  const [text, setText] = useState(() => JSON.stringify(workflow.steps, null, 2));
  const [parseError, setParseError] = useState<string | undefined>();
  const [saved, setSaved] = useState(false);
  useEffect(() => setText(JSON.stringify(workflow.steps, null, 2)), [workflow.steps]);
  const save = useMutation({
    mutationFn: (steps: Record<string, unknown>[]) => api('patch', '/workflows/{id}', { params: { id: workflow.id }, body: { steps } }),
    onSuccess: (w) => {
      onSaved(w);
      setSaved(true);
    },
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    setSaved(false);
    let steps: unknown;
    try {
      steps = JSON.parse(text);
    } catch {
      setParseError('Not valid JSON');
      return;
    }
    if (!Array.isArray(steps)) {
      setParseError('Must be a JSON array of steps');
      return;
    }
    setParseError(undefined);
    save.mutate(steps as Record<string, unknown>[]);
  };
  const pointerErrors = save.error instanceof ApiError ? save.error.errors : [];
  return (
    <section className="card" aria-labelledby="steps-heading">
      <h2 id="steps-heading">Steps</h2>
      <form onSubmit={submit} noValidate aria-label="Steps">
        <fieldset disabled={!canWrite}>
          <legend className="visually-hidden">Steps</legend>
          {saved && <Alert kind="success">Saved.</Alert>}
          {save.error ? (
            <Alert>
              {describeError(save.error)}
              {pointerErrors.length > 0 && (
                <ul>
                  {pointerErrors.map((e) => (
                    <li key={e.path}>
                      <code>{e.path}</code> {e.message}
                    </li>
                  ))}
                </ul>
              )}
            </Alert>
          ) : null}
          <TextAreaField
            label="Steps (JSON)"
            className="code"
            rows={Math.min(20, Math.max(5, text.split('\n').length + 1))}
            value={text}
            onChange={(e) => setText(e.target.value)}
            error={parseError}
            hint='e.g. [{"type": "add_tags", "tags": ["signed-up"]}, {"type": "send_email", "templateId": 1}]'
          />
          {canWrite && (
            <button type="submit" className="button-primary" disabled={save.isPending}>
              Save steps
            </button>
          )}
        </fieldset>
      </form>
    </section>
  );
}
