import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useEffect, useState, type FormEvent } from 'react';
import { Link, useLocation } from 'wouter';
import { api, describeError, fieldError } from '../api/client';
import { useCan } from '../app/session';
import { Alert, ErrorAlert } from '../ui/Alert';
import { Field, SelectField, TextAreaField } from '../ui/Field';
import { Page } from '../ui/Page';
import { TemplatePreview } from './TemplatePreview';

type Channel = 'EMAIL' | 'SMS' | 'WHATSAPP';

interface Form {
  name: string;
  channel: Channel;
  subject: string;
  html: string;
  text: string;
  /** WhatsApp: a free text, or an approved template with its language and parameters. */
  whatsappKind: 'text' | 'template';
  templateName: string;
  language: string;
  parameters: string;
}

const EMPTY: Form = { name: '', channel: 'EMAIL', subject: '', html: '', text: '', whatsappKind: 'text', templateName: '', language: 'en', parameters: '' };

function contentOf(f: Form): Record<string, unknown> {
  switch (f.channel) {
    case 'EMAIL':
      return { subject: f.subject, ...(f.html ? { html: f.html } : {}), ...(f.text ? { text: f.text } : {}) };
    case 'SMS':
      return { text: f.text };
    case 'WHATSAPP':
      return f.whatsappKind === 'text'
        ? { text: f.text }
        : { templateName: f.templateName, language: f.language, parameters: f.parameters.split('\n').filter((p) => p.trim() !== '') };
  }
}

function formOf(t: { name: string; channel: Channel; content: Record<string, unknown> }): Form {
  const c = t.content;
  const str = (v: unknown) => (typeof v === 'string' ? v : '');
  return {
    ...EMPTY,
    name: t.name,
    channel: t.channel,
    subject: str(c.subject),
    html: str(c.html),
    text: str(c.text),
    whatsappKind: 'templateName' in c ? 'template' : 'text',
    templateName: str(c.templateName),
    language: str(c.language) || 'en',
    parameters: Array.isArray(c.parameters) ? c.parameters.join('\n') : '',
  };
}

/** A template: per-channel fields, Liquid errors at their field and line, and a preview. */
export function TemplateEditor({ id }: { id: number | null }) {
  const canWrite = useCan('MEMBER');
  const queries = useQueryClient();
  const [, navigate] = useLocation();
  const [form, setForm] = useState<Form>(EMPTY);
  const [saved, setSaved] = useState(false);
  const template = useQuery({ queryKey: ['template', id], queryFn: () => api('get', '/templates/{id}', { params: { id: id! } }), enabled: id !== null });
  useEffect(() => {
    if (template.data) setForm(formOf(template.data));
  }, [template.data]);

  const save = useMutation({
    mutationFn: async (f: Form) => {
      const body = { name: f.name.trim(), channel: f.channel, content: contentOf(f) };
      return id === null ? api('post', '/templates', { body }) : api('patch', '/templates/{id}', { params: { id }, body });
    },
    onSuccess: (t) => {
      setSaved(true);
      queries.setQueryData(['template', t.id], t);
      void queries.invalidateQueries({ queryKey: ['templates'] });
      if (id === null) navigate(`/${t.id}`, { replace: true });
    },
  });
  const set = (key: keyof Form) => (e: { target: { value: string } }) => {
    setSaved(false);
    setForm((f) => ({ ...f, [key]: e.target.value }));
  };
  const submit = (e: FormEvent) => {
    e.preventDefault();
    setSaved(false);
    save.mutate(form);
  };
  const err = save.error;
  const at = (pointer: string) => fieldError(err, pointer);
  const contentError =
    err &&
    (fieldError(err, '/content') && !['subject', 'html', 'text', 'templateName', 'language', 'parameters'].some((k) => at(`/content/${k}`))
      ? at('/content')
      : undefined);
  const anyAtField = ['/name', '/content/subject', '/content/html', '/content/text', '/content/templateName', '/content/language', '/content/parameters'].some(
    (p) => at(p),
  );

  if (id !== null && template.error) {
    return (
      <Page title="Template">
        <ErrorAlert error={template.error} />
        <Link href="/">Back to templates</Link>
      </Page>
    );
  }
  const title = id === null ? 'New template' : (template.data?.name ?? 'Template');
  return (
    <Page title={title}>
      <p>
        <Link href="/">← All templates</Link>
      </p>
      <div className="editor-grid">
        <form className="card form" onSubmit={submit} noValidate aria-label="Template">
          <fieldset disabled={!canWrite || (id !== null && template.isPending)}>
            <legend className="visually-hidden">Template</legend>
            {err && !anyAtField && !contentError ? <Alert>{describeError(err)}</Alert> : null}
            {err && (anyAtField || contentError) ? <Alert>{contentError ?? 'Check the fields marked below.'}</Alert> : null}
            {saved && <Alert kind="success">Saved.</Alert>}
            <Field label="Name" value={form.name} onChange={set('name')} error={at('/name')} />
            <SelectField
              label="Channel"
              value={form.channel}
              onChange={set('channel')}
              options={[
                { value: 'EMAIL', label: 'Email' },
                { value: 'SMS', label: 'SMS' },
                { value: 'WHATSAPP', label: 'WhatsApp' },
              ]}
            />
            {form.channel === 'EMAIL' && (
              <>
                <Field label="Subject" value={form.subject} onChange={set('subject')} error={at('/content/subject')} />
                <TextAreaField label="HTML" value={form.html} onChange={set('html')} error={at('/content/html')} rows={8} className="code" />
                <TextAreaField label="Text" value={form.text} onChange={set('text')} error={at('/content/text')} />
              </>
            )}
            {form.channel === 'SMS' && <TextAreaField label="Text" value={form.text} onChange={set('text')} error={at('/content/text')} />}
            {form.channel === 'WHATSAPP' && (
              <>
                <SelectField
                  label="Message kind"
                  value={form.whatsappKind}
                  onChange={set('whatsappKind')}
                  options={[
                    { value: 'text', label: 'Free text (inside the 24-hour window)' },
                    { value: 'template', label: 'Approved template' },
                  ]}
                />
                {form.whatsappKind === 'text' ? (
                  <TextAreaField label="Text" value={form.text} onChange={set('text')} error={at('/content/text')} />
                ) : (
                  <>
                    <Field label="Template name" value={form.templateName} onChange={set('templateName')} error={at('/content/templateName')} />
                    <Field label="Language" value={form.language} onChange={set('language')} error={at('/content/language')} hint="e.g. en or en_US" />
                    <TextAreaField
                      label="Parameters"
                      value={form.parameters}
                      onChange={set('parameters')}
                      error={at('/content/parameters')}
                      hint="One per line; each may use Liquid"
                    />
                  </>
                )}
              </>
            )}
            <p className="hint">
              Every field is a Liquid template: <code>{'{{ contact.firstName }}'}</code>, <code>{'{{ trigger.total }}'}</code>,{' '}
              <code>{'{{ workspace.name }}'}</code>.
            </p>
            {canWrite && (
              <button type="submit" className="button-primary" disabled={save.isPending}>
                {save.isPending ? 'Saving…' : 'Save'}
              </button>
            )}
          </fieldset>
        </form>
        {id !== null && template.data && <TemplatePreview id={id} version={template.data.updatedAt} />}
      </div>
    </Page>
  );
}
