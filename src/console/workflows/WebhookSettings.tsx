import { useMutation } from '@tanstack/react-query';
import { useEffect, useState, type FormEvent } from 'react';
import { api, ApiError, describeError, fieldError, type BodyOf } from '../api/client';
import { Alert } from '../ui/Alert';
import { Field, SelectField, TextAreaField } from '../ui/Field';
import { parseTags } from '../steps/catalog';
import type { Workflow, WorkflowSectionProps } from './types';

type Lookup = 'email' | 'phone' | 'contactId';
type Defaults = Workflow['webhook']['defaults'];

const LOOKUPS: { value: Lookup | ''; label: string }[] = [
  { value: '', label: 'None (required to activate)' },
  { value: 'email', label: 'By email' },
  { value: 'phone', label: 'By phone' },
  { value: 'contactId', label: 'By contact id' },
];

interface Form {
  lookup: Lookup | '';
  path: string;
  create: boolean;
  firstName: string;
  lastName: string;
  tags: string;
  attributes: string;
}

function formOf(hook: Workflow['webhook']): Form {
  const d = hook.defaults;
  return {
    lookup: hook.lookup ?? '',
    // The API answers the lookup's name when no path is set: show the field empty then.
    path: hook.path && hook.path !== hook.lookup ? hook.path : '',
    create: hook.createIfNotFound,
    firstName: d.firstName ?? '',
    lastName: d.lastName ?? '',
    tags: (d.tags ?? []).join(', '),
    attributes: d.attributes && Object.keys(d.attributes).length ? JSON.stringify(d.attributes, null, 2) : '',
  };
}

/** How a POST finds its contact: lookup kind, path in the body, create-if-not-found and the new contact's defaults. */
export function WebhookSettings({ workflow, canWrite, onSaved, activationError }: WorkflowSectionProps) {
  const hook = workflow.webhook;
  const [form, setForm] = useState<Form>(() => formOf(hook));
  const [attributesError, setAttributesError] = useState<string | undefined>();
  const [saved, setSaved] = useState(false);
  const savedJson = JSON.stringify([hook.lookup, hook.path, hook.createIfNotFound, hook.defaults]);
  // biome-ignore lint/correctness/useExhaustiveDependencies: the saved settings, compared by value
  useEffect(() => setForm(formOf(hook)), [savedJson]);

  const save = useMutation({
    mutationFn: (webhook: NonNullable<BodyOf<'/workflows/{id}', 'patch'>['webhook']>) =>
      api('patch', '/workflows/{id}', { params: { id: workflow.id }, body: { webhook } }),
    onSuccess: (w) => {
      onSaved(w);
      setSaved(true);
    },
  });
  const set = (patch: Partial<Form>) => {
    setForm({ ...form, ...patch });
    setSaved(false);
  };

  const submit = (e: FormEvent) => {
    e.preventDefault();
    setSaved(false);
    let attributes: Record<string, unknown> | undefined;
    if (form.attributes.trim()) {
      try {
        attributes = JSON.parse(form.attributes) as Record<string, unknown>;
      } catch {
        attributes = undefined;
      }
      if (!attributes || typeof attributes !== 'object' || Array.isArray(attributes)) {
        setAttributesError('Must be a JSON object, e.g. {"source": "shop"}');
        return;
      }
    }
    setAttributesError(undefined);
    const tags = parseTags(form.tags);
    const defaults: Defaults = {
      ...(form.firstName.trim() ? { firstName: form.firstName.trim() } : {}),
      ...(form.lastName.trim() ? { lastName: form.lastName.trim() } : {}),
      ...(tags.length ? { tags } : {}),
      ...(attributes ? { attributes } : {}),
    };
    save.mutate({ lookup: form.lookup || null, path: form.path.trim() || null, createIfNotFound: form.create, defaults });
  };

  // A field's problem from this form's save, or from a refused activation.
  const at = (p: string) => fieldError(save.error, `/webhook/${p}`) ?? fieldError(activationError, `/webhook/${p}`);
  const shown = ['lookup', 'path', 'createIfNotFound', 'defaults'];
  const unplaced = save.error instanceof ApiError && !save.error.errors.some((e) => shown.some((f) => e.path.startsWith(`/webhook/${f}`)));

  if (!canWrite) {
    const d = hook.defaults;
    return (
      <section className="card" aria-labelledby="webhook-heading">
        <h2 id="webhook-heading">Webhook settings</h2>
        <dl className="facts">
          <dt>Contact lookup</dt>
          <dd>{LOOKUPS.find((l) => l.value === (hook.lookup ?? ''))?.label}</dd>
          <dt>Path in the body</dt>
          <dd>{hook.path ? <code>{hook.path}</code> : '—'}</dd>
          <dt>When no contact matches</dt>
          <dd>{hook.createIfNotFound ? 'A contact is created' : 'The POST is refused (404)'}</dd>
          <dt>Defaults for new contacts</dt>
          <dd>
            {[
              d.firstName && `first name ${d.firstName}`,
              d.lastName && `last name ${d.lastName}`,
              d.tags?.length && `tags ${d.tags.join(', ')}`,
              d.attributes && Object.keys(d.attributes).length && `attributes ${JSON.stringify(d.attributes)}`,
            ]
              .filter(Boolean)
              .join('; ') || '—'}
          </dd>
        </dl>
      </section>
    );
  }

  return (
    <section className="card" aria-labelledby="webhook-heading">
      <h2 id="webhook-heading">Webhook settings</h2>
      <form onSubmit={submit} noValidate aria-label="Webhook settings">
        {save.error && unplaced ? <Alert>{describeError(save.error)}</Alert> : null}
        {saved && <Alert kind="success">Saved.</Alert>}
        <div className="grid-2">
          <SelectField
            label="Contact lookup"
            value={form.lookup}
            onChange={(e) => set({ lookup: e.target.value as Lookup | '' })}
            error={at('lookup')}
            options={LOOKUPS}
          />
          <Field
            label="Path in the body"
            value={form.path}
            onChange={(e) => set({ path: e.target.value })}
            error={at('path')}
            placeholder={form.lookup || 'email'}
            hint={
              <>
                Where the value is in the posted JSON, e.g. <code>customer.email</code> or <code>fields[0].value</code>. Empty:{' '}
                <code>{form.lookup || 'email'}</code>.
              </>
            }
          />
        </div>
        <div className="checkbox">
          <input id={`create-if-not-found-${workflow.id}`} type="checkbox" checked={form.create} onChange={(e) => set({ create: e.target.checked })} />
          <label htmlFor={`create-if-not-found-${workflow.id}`}>Create the contact when none matches</label>
        </div>
        {form.create && form.lookup === 'contactId' && (
          <p className="hint create-note">A contact id that matches no contact is always refused: only email and phone lookups create contacts.</p>
        )}
        <fieldset className="defaults" disabled={!form.create}>
          <legend>Defaults for a new contact</legend>
          <p className="hint">
            {form.create
              ? 'A contact created by this webhook gets its email or phone from the body and these values.'
              : 'Used only when contacts are created: turn on “Create the contact when none matches”.'}
          </p>
          <div className="grid-2">
            <Field label="Default first name" value={form.firstName} onChange={(e) => set({ firstName: e.target.value })} error={at('defaults/firstName')} />
            <Field label="Default last name" value={form.lastName} onChange={(e) => set({ lastName: e.target.value })} error={at('defaults/lastName')} />
          </div>
          <Field
            label="Default tags"
            value={form.tags}
            onChange={(e) => set({ tags: e.target.value })}
            error={at('defaults/tags')}
            hint="Separate tags with commas."
          />
          <TextAreaField
            label="Default attributes (JSON)"
            className="code"
            rows={3}
            value={form.attributes}
            onChange={(e) => set({ attributes: e.target.value })}
            error={attributesError ?? at('defaults/attributes')}
            hint='A JSON object, e.g. {"source": "shop"}. Empty: none.'
          />
        </fieldset>
        <button type="submit" className="button-primary" disabled={save.isPending}>
          Save webhook settings
        </button>
      </form>
    </section>
  );
}
