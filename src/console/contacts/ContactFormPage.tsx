import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useEffect, useState, type FormEvent } from 'react';
import { Link, useLocation } from 'wouter';
import { api, ApiError, describeError, fieldError } from '../api/client';
import { useCan, useMe } from '../app/session';
import { Alert, ErrorAlert } from '../ui/Alert';
import { ConfirmButton } from '../ui/ConfirmButton';
import { Field } from '../ui/Field';
import { formatTime, Page } from '../ui/Page';
import {
  type AttributeProblems,
  type AttributeRow,
  type Attributes,
  AttributesEditor,
  AttributesList,
  apiProblems,
  attributesToSend,
  hasProblems,
  mergeProblems,
  NO_PROBLEMS,
  rowsOf,
} from './AttributesEditor';

interface Form {
  email: string;
  phone: string;
  firstName: string;
  lastName: string;
  tags: string;
}

const EMPTY: Form = { email: '', phone: '', firstName: '', lastName: '', tags: '' };

const parseTags = (text: string) => [
  ...new Set(
    text
      .split(',')
      .map((t) => t.trim())
      .filter(Boolean),
  ),
];
const orNull = (text: string) => (text.trim() ? text.trim() : null);

/** The field a 409 contact_exists names ("… already has this email"). */
function conflictField(err: unknown): 'email' | 'phone' | undefined {
  if (!(err instanceof ApiError) || err.status !== 409) return undefined;
  return /\bphone\b/.test(err.detail) ? 'phone' : /\bemail\b/.test(err.detail) ? 'email' : undefined;
}

/** New contact (id null) or an existing one: edit, tags, delete. */
export function ContactFormPage({ id }: { id: number | null }) {
  const canWrite = useCan('MEMBER');
  const { role } = useMe();
  const queries = useQueryClient();
  const [, navigate] = useLocation();
  const [form, setForm] = useState<Form>(EMPTY);
  const [saved, setSaved] = useState(false);
  const [rows, setRows] = useState<AttributeRow[]>([]);
  /** The tags as the field showed them when loaded: left as they are unless the field changed (a tag may hold a comma). */
  const [tagsShown, setTagsShown] = useState('');
  /** Problems found in the browser before sending (names, values); cleared by the next edit of the rows. */
  const [rowProblems, setRowProblems] = useState<AttributeProblems>(NO_PROBLEMS);
  const contact = useQuery({
    queryKey: ['contact', id],
    queryFn: () => api('get', '/contacts/{id}', { params: { id: id! } }),
    enabled: id !== null,
  });

  useEffect(() => {
    const c = contact.data;
    if (c) {
      setForm({ email: c.email ?? '', phone: c.phone ?? '', firstName: c.firstName ?? '', lastName: c.lastName ?? '', tags: c.tags.join(', ') });
      setTagsShown(c.tags.join(', '));
      setRows(rowsOf(c.attributes));
      setRowProblems(NO_PROBLEMS);
    }
  }, [contact.data]);

  const save = useMutation({
    mutationFn: async ({ form: f, attributes }: { form: Form; attributes: Attributes | undefined }) => {
      const fields = { email: orNull(f.email), phone: orNull(f.phone), firstName: orNull(f.firstName), lastName: orNull(f.lastName) };
      const tags = parseTags(f.tags);
      if (id === null) return api('post', '/contacts', { body: { ...fields, tags, ...(attributes ? { attributes } : {}) } });
      // PATCH merges attributes (a null removes a name): `attributes` holds only what changed.
      let updated = await api('patch', '/contacts/{id}', { params: { id }, body: { ...fields, ...(attributes ? { attributes } : {}) } });
      if (f.tags === tagsShown) return updated;
      const had = new Map(updated.tags.map((t) => [t.toLowerCase(), t]));
      const wanted = new Set(tags.map((t) => t.toLowerCase()));
      const added = tags.filter((t) => !had.has(t.toLowerCase()));
      if (added.length) updated = await api('post', '/contacts/{id}/tags', { params: { id }, body: { tags: added } });
      for (const [key, tag] of had) if (!wanted.has(key)) await api('delete', '/contacts/{id}/tags/{tag}', { params: { id, tag } });
      return api('get', '/contacts/{id}', { params: { id } });
    },
    onSuccess: (c) => {
      void queries.invalidateQueries({ queryKey: ['contacts'] });
      void queries.invalidateQueries({ queryKey: ['tags'] });
      queries.setQueryData(['contact', c.id], c);
      setSaved(true);
      if (id === null) navigate(`/contacts/${c.id}`, { replace: true });
    },
  });

  const submit = (e: FormEvent) => {
    e.preventDefault();
    setSaved(false);
    const checked = attributesToSend(rows, id === null ? null : (contact.data?.attributes ?? {}));
    if (!checked.ok) {
      save.reset();
      setRowProblems(checked.problems);
      return;
    }
    setRowProblems(NO_PROBLEMS);
    save.mutate({ form, attributes: checked.attributes });
  };
  const changeRows = (next: AttributeRow[]) => {
    setSaved(false);
    setRowProblems(NO_PROBLEMS);
    setRows(next);
  };

  const set = (key: keyof Form) => (e: { target: { value: string } }) => {
    setSaved(false);
    setForm((f) => ({ ...f, [key]: e.target.value }));
  };
  const err = save.error;
  const conflict = conflictField(err);
  const errorAt = (field: keyof Form) => fieldError(err, `/${field}`) ?? (conflict === field ? describeError(err) : undefined);
  const attributeProblems = mergeProblems(rowProblems, apiProblems(err, rows));
  const shownAtField = (['email', 'phone', 'firstName', 'lastName', 'tags'] as const).some((f) => errorAt(f)) || hasProblems(attributeProblems);

  if (id !== null && contact.error) {
    return (
      <Page title="Contact">
        <ErrorAlert error={contact.error} />
        <Link href="/contacts">Back to contacts</Link>
      </Page>
    );
  }
  if (id === null && !canWrite) {
    return (
      <Page title="New contact">
        <Alert kind="info">Creating contacts needs the MEMBER role or above; you have {role}.</Alert>
        <Link href="/contacts">Back to contacts</Link>
      </Page>
    );
  }
  const title = id === null ? 'New contact' : 'Contact';
  return (
    <Page
      title={title}
      actions={
        id !== null &&
        canWrite &&
        contact.data && (
          <ConfirmButton
            label="Delete contact"
            question={`Delete ${contact.data.email ?? contact.data.phone ?? 'this contact'}? Its runs keep their history; this cannot be undone.`}
            onConfirm={async () => {
              await api('delete', '/contacts/{id}', { params: { id } });
              void queries.invalidateQueries({ queryKey: ['contacts'] });
              navigate('/contacts', { replace: true });
            }}
          />
        )
      }
    >
      <p>
        <Link href="/contacts">← All contacts</Link>
      </p>
      <form className="card form" onSubmit={submit} noValidate>
        <fieldset disabled={!canWrite || (id !== null && contact.isPending)}>
          <legend className="visually-hidden">{title}</legend>
          {err && !shownAtField ? <Alert>{describeError(err)}</Alert> : null}
          {shownAtField ? <Alert>Check the fields marked below.</Alert> : null}
          {saved && <Alert kind="success">Saved.</Alert>}
          <div className="grid-2">
            <Field label="Email" type="email" autoComplete="off" value={form.email} onChange={set('email')} error={errorAt('email')} />
            <Field
              label="Phone"
              type="tel"
              autoComplete="off"
              value={form.phone}
              onChange={set('phone')}
              error={errorAt('phone')}
              hint="International format, e.g. +14155550100"
            />
            <Field label="First name" value={form.firstName} onChange={set('firstName')} error={errorAt('firstName')} />
            <Field label="Last name" value={form.lastName} onChange={set('lastName')} error={errorAt('lastName')} />
          </div>
          <Field label="Tags" value={form.tags} onChange={set('tags')} error={errorAt('tags')} hint="Separated by commas" />
          {canWrite ? (
            <AttributesEditor rows={rows} onChange={changeRows} problems={attributeProblems} editing={id !== null} />
          ) : (
            contact.data && <AttributesList attributes={contact.data.attributes} />
          )}
          {canWrite && (
            <button type="submit" className="button-primary" disabled={save.isPending}>
              {save.isPending ? 'Saving…' : 'Save'}
            </button>
          )}
        </fieldset>
      </form>
      {contact.data && (
        <p className="meta">
          Created {formatTime(contact.data.createdAt)} · updated {formatTime(contact.data.updatedAt)}
        </p>
      )}
    </Page>
  );
}
