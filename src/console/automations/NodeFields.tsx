import { useEffect, useRef, useState } from 'react';
import { Field, SelectField, TextAreaField } from '../ui/Field';
import { LoadMore, type MoreQuery } from '../ui/paging';
import { durationText, HTTP_METHODS, MAX_WAIT_SECONDS, parseTags, RECIPIENT, SEND_CHANNEL } from '../steps/catalog';
import type { GraphNode } from './catalog';

export interface TemplateOption {
  id: number;
  name: string;
  channel: string;
}

interface Props {
  node: GraphNode;
  /** New data for the node; `field` groups keystrokes in one field into one undo step. */
  onChange: (data: Record<string, unknown>, field: string) => void;
  /** Problems of the last refused save at this node's data fields ("condition", "tags/0"). */
  errorAt: (field: string) => string | undefined;
  templates: TemplateOption[];
  /** The next page of templates, while the API has more. */
  moreTemplates?: MoreQuery | undefined;
}

/**
 * A text field for a value that is not a string (tags, lines of pairs, JSON): the text typed
 * is kept as typed while it parses to the value, and follows the value when it changes from
 * elsewhere (undo, redo).
 */
function useDraft<V>(value: V, format: (v: V) => string): [string, (text: string, parsed: V | undefined) => void] {
  const [text, setText] = useState(() => format(value));
  const mine = useRef(JSON.stringify(value ?? null));
  const now = JSON.stringify(value ?? null);
  useEffect(() => {
    if (now !== mine.current) {
      mine.current = now;
      setText(format(JSON.parse(now) as V));
    }
  }, [now, format]);
  return [
    text,
    (next, parsed) => {
      setText(next);
      if (parsed !== undefined) mine.current = JSON.stringify(parsed);
    },
  ];
}

const formatTags = (v: unknown) => (Array.isArray(v) ? v.join(', ') : '');
const formatPairs = (sep: string) => (v: unknown) =>
  v && typeof v === 'object'
    ? Object.entries(v)
        .map(([k, x]) => `${k}${sep}${String(x)}`)
        .join('\n')
    : '';
const formatSet = formatPairs(' = ');
const formatHeaders = formatPairs(': ');
const formatJson = (v: unknown) => (v === undefined || v === null ? '' : JSON.stringify(v, null, 2));

/** "a = b" lines into an object; undefined with the line that is not a pair. */
function parsePairs(text: string, sep: string): { value?: Record<string, string>; error?: string } {
  const out: Record<string, string> = {};
  const lines = text.split('\n');
  for (const [i, line] of lines.entries()) {
    if (!line.trim()) continue;
    const at = line.indexOf(sep);
    if (at <= 0) return { error: `Line ${i + 1} is not “name${sep === ':' ? ':' : ' ='} value”` };
    out[line.slice(0, at).trim()] = line.slice(at + sep.length).trim();
  }
  return { value: out };
}

function without(data: Record<string, unknown>, key: string): Record<string, unknown> {
  const { [key]: _, ...rest } = data;
  return rest;
}

/** The fields of the selected node, by its type (the step catalog of API.md section 3). */
export function NodeFields({ node, onChange, errorAt, templates, moreTemplates }: Props) {
  const d = node.data;
  const set = (key: string, value: unknown) => onChange(value === undefined ? without(d, key) : { ...d, [key]: value }, key);
  const [tagsText, setTagsText] = useDraft(d.tags, formatTags);
  const [setText, setSetText] = useDraft(d.set, formatSet);
  const [headersText, setHeadersText] = useDraft(d.headers, formatHeaders);
  const [bodyText, setBodyText] = useDraft(d.body, formatJson);
  const [local, setLocal] = useState<Record<string, string | undefined>>({});
  const problem = (field: string) => local[field] ?? errorAt(field);

  switch (node.type) {
    case 'trigger':
      return <p className="hint">A manual trigger: a run starts when someone uses Run on a contact (or the API starts one).</p>;
    case 'condition':
    case 'filter':
      return (
        <Field
          label="Condition"
          value={typeof d.condition === 'string' ? d.condition : ''}
          onChange={(e) => set('condition', e.target.value)}
          error={errorAt('condition')}
          hint={
            node.type === 'condition'
              ? 'Liquid, e.g. contact.firstName == "Ann" or trigger.total > 100. The true and false outputs lead to the next steps.'
              : 'Liquid, e.g. trigger.total > 100. The run ends here when it is false.'
          }
          spellCheck={false}
        />
      );
    case 'add_tags':
    case 'remove_tags':
      return (
        <Field
          label="Tags"
          value={tagsText}
          onChange={(e) => {
            const tags = parseTags(e.target.value);
            setTagsText(e.target.value, tags);
            set('tags', tags);
          }}
          error={errorAt('tags')}
          hint="Separate tags with commas."
        />
      );
    case 'wait': {
      const seconds = typeof d.seconds === 'number' ? d.seconds : undefined;
      return (
        <Field
          label="Wait (seconds)"
          type="number"
          min={1}
          step={1}
          value={seconds ?? ''}
          onChange={(e) => set('seconds', e.target.value === '' ? undefined : Number(e.target.value))}
          error={errorAt('seconds')}
          hint={seconds && seconds > 0 ? `That is ${durationText(seconds)}. At most 30 days.` : `At most 30 days (${MAX_WAIT_SECONDS} seconds).`}
        />
      );
    }
    case 'send_email':
    case 'send_sms':
    case 'send_whatsapp': {
      const channel = SEND_CHANNEL[node.type]!;
      const options = templates.filter((t) => t.channel === channel);
      return (
        <>
          <SelectField
            label="Template"
            value={typeof d.templateId === 'number' ? String(d.templateId) : ''}
            onChange={(e) => set('templateId', e.target.value ? Number(e.target.value) : undefined)}
            error={errorAt('templateId')}
            options={[
              { value: '', label: options.length || moreTemplates?.hasNextPage ? 'Choose a template' : `No ${channel.toLowerCase()} template yet` },
              ...options.map((t) => ({ value: String(t.id), label: t.name })),
              // A template chosen before, on a page not loaded yet.
              ...(typeof d.templateId === 'number' && !options.some((t) => t.id === d.templateId)
                ? [{ value: String(d.templateId), label: `Template #${d.templateId}` }]
                : []),
            ]}
          />
          {moreTemplates && <LoadMore query={moreTemplates} label="Load more templates" />}
          <Field
            label="To (optional)"
            value={typeof d.to === 'string' ? d.to : ''}
            onChange={(e) => set('to', e.target.value === '' ? undefined : e.target.value)}
            error={errorAt('to')}
            hint={`Liquid; empty sends to the contact's ${RECIPIENT[channel]}.`}
          />
        </>
      );
    }
    case 'update_contact':
      return (
        <TextAreaField
          label="Fields to set"
          value={setText}
          onChange={(e) => {
            const parsed = parsePairs(e.target.value, '=');
            setSetText(e.target.value, parsed.value);
            setLocal((l) => ({ ...l, set: parsed.error }));
            if (parsed.value) set('set', parsed.value);
          }}
          error={problem('set')}
          hint="One per line: field = value. Fields: firstName, lastName, email, phone or attributes.name; values are Liquid."
          spellCheck={false}
        />
      );
    case 'http_request':
      return (
        <>
          <SelectField
            label="Method"
            value={typeof d.method === 'string' ? d.method : 'POST'}
            onChange={(e) => set('method', e.target.value)}
            error={errorAt('method')}
            options={HTTP_METHODS.map((m) => ({ value: m, label: m }))}
          />
          <Field
            label="URL"
            value={typeof d.url === 'string' ? d.url : ''}
            onChange={(e) => set('url', e.target.value)}
            error={errorAt('url')}
            hint="Liquid allowed."
            spellCheck={false}
          />
          <TextAreaField
            label="Headers"
            value={headersText}
            rows={3}
            onChange={(e) => {
              const parsed = parsePairs(e.target.value, ':');
              setHeadersText(e.target.value, parsed.value);
              setLocal((l) => ({ ...l, headers: parsed.error }));
              if (parsed.value) set('headers', Object.keys(parsed.value).length ? parsed.value : undefined);
            }}
            error={problem('headers')}
            hint="One per line: Name: value."
            spellCheck={false}
          />
          <TextAreaField
            label="Body (JSON)"
            className="code"
            value={bodyText}
            onChange={(e) => {
              const text = e.target.value;
              let parsed: unknown;
              let error: string | undefined;
              if (text.trim()) {
                try {
                  parsed = JSON.parse(text);
                } catch {
                  error = 'Not valid JSON yet';
                }
              }
              setBodyText(text, parsed);
              setLocal((l) => ({ ...l, body: error }));
              if (!error) set('body', parsed);
            }}
            error={problem('body')}
            hint="Optional; strings in it are Liquid."
            spellCheck={false}
          />
        </>
      );
    default:
      return <p className="hint">This node type has no fields the console knows.</p>;
  }
}
