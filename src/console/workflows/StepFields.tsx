import type { ReactNode } from 'react';
import { Link } from 'wouter';
import type { TemplateOption } from '../templates/options';
import { Field, SelectField, TextAreaField } from '../ui/Field';
import { LoadMore, type MoreQuery } from '../ui/paging';
import { HTTP_METHODS, RECIPIENT, SEND_CHANNEL, WAIT_UNITS, type Channel, type WaitUnit } from '../steps/catalog';
import { CONTACT_FIELDS, newKey, setKeyOf, type HeaderRow, type SetRow, type StepDraft } from './stepCatalog';

export type { TemplateOption };

interface Props {
  step: StepDraft;
  /** The step's position (1-based), for the names of repeated controls. */
  number: number;
  templates: TemplateOption[] | undefined;
  /** The next page of templates, while the API has more. */
  moreTemplates?: MoreQuery | undefined;
  onChange: (patch: Partial<StepDraft>) => void;
  /** The problem at a field of this step ("/templateId"), if any. */
  error: (path: string) => string | undefined;
}

const CHANNEL_WORD: Record<Channel, string> = { EMAIL: 'email', SMS: 'SMS', WHATSAPP: 'WhatsApp' };
const CHOOSE: Record<Channel, string> = { EMAIL: 'Choose an email template…', SMS: 'Choose an SMS template…', WHATSAPP: 'Choose a WhatsApp template…' };

/** The inputs of one step, fitting its type. */
export function StepFields({ step, number, templates, moreTemplates, onChange, error }: Props) {
  switch (step.type) {
    case 'send_email':
    case 'send_sms':
    case 'send_whatsapp':
      return <SendFields step={step} templates={templates} moreTemplates={moreTemplates} onChange={onChange} error={error} />;
    case 'wait':
      return (
        <div className="step-row">
          <Field
            label="Wait for"
            type="number"
            inputMode="decimal"
            min={1}
            value={step.amount}
            onChange={(e) => onChange({ amount: e.target.value })}
            error={error('/seconds')}
            hint="At most 30 days."
          />
          <SelectField
            label="Unit"
            value={step.unit}
            onChange={(e) => onChange({ unit: e.target.value as WaitUnit })}
            options={WAIT_UNITS.map((u) => ({ value: u.value, label: u.label }))}
          />
        </div>
      );
    case 'add_tags':
    case 'remove_tags':
      return (
        <Field label="Tags" value={step.tags} onChange={(e) => onChange({ tags: e.target.value })} error={error('/tags')} hint="Separate tags with commas." />
      );
    case 'update_contact':
      return <SetFields step={step} number={number} onChange={onChange} error={error} />;
    case 'http_request':
      return <HttpFields step={step} number={number} onChange={onChange} error={error} />;
    case 'filter':
      return (
        <Field
          label="Condition"
          value={step.condition}
          onChange={(e) => onChange({ condition: e.target.value })}
          error={error('/condition')}
          hint={
            <>
              A Liquid condition such as <code>trigger.total &gt; 100</code> or <code>contact.tags contains "vip"</code>. The run ends here when it is false.
            </>
          }
        />
      );
  }
}

function SendFields({ step, templates, moreTemplates, onChange, error }: Omit<Props, 'number'>) {
  const channel = SEND_CHANNEL[step.type]!;
  const ofChannel = (templates ?? []).filter((t) => t.channel === channel);
  const chosen = step.templateId ? Number(step.templateId) : null;
  const known = chosen !== null && ofChannel.some((t) => t.id === chosen);
  // Templates not loaded yet may hold it: "missing" only once every page is in.
  const allLoaded = templates !== undefined && !moreTemplates?.hasNextPage;
  const options = [
    { value: '', label: templates ? CHOOSE[channel] : 'Loading templates…' },
    ...ofChannel.map((t) => ({ value: String(t.id), label: `${t.name} (#${t.id})` })),
    ...(chosen !== null && !known && templates
      ? [{ value: String(chosen), label: allLoaded ? `Template #${chosen} (missing, or not ${CHANNEL_WORD[channel]})` : `Template #${chosen}` }]
      : []),
  ];
  return (
    <div className="step-row">
      <div className="step-template">
        <SelectField
          label="Template"
          value={step.templateId}
          onChange={(e) => onChange({ templateId: e.target.value })}
          error={error('/templateId')}
          options={options}
        />
        <p className="hint">
          {allLoaded && ofChannel.length === 0 ? (
            <>
              No {CHANNEL_WORD[channel]} template yet: <Link href="~/app/templates/new">create one</Link>.
            </>
          ) : known || (chosen !== null && !allLoaded) ? (
            <Link href={`~/app/templates/${chosen}`}>Open the template</Link>
          ) : null}
        </p>
        {moreTemplates && <LoadMore query={moreTemplates} label="Load more templates" />}
      </div>
      <Field
        label="Send to"
        value={step.to}
        onChange={(e) => onChange({ to: e.target.value })}
        error={error('/to')}
        hint={
          <>
            Optional, Liquid such as <code>{'{{ trigger.customer.email }}'}</code>. Empty: the contact's {RECIPIENT[channel]}.
          </>
        }
      />
    </div>
  );
}

function SetFields({ step, number, onChange, error }: Omit<Props, 'templates'>) {
  const update = (key: string, patch: Partial<SetRow>) => onChange({ set: step.set.map((r) => (r.key === key ? { ...r, ...patch } : r)) });
  const whole = error('/set') && !step.set.some((r) => error(`/set/${setKeyOf(r)}`)) ? error('/set') : undefined;
  return (
    <PairList
      rows={step.set}
      fields={(row, j) => (
        <>
          <SelectField
            label={`Contact field ${j + 1}`}
            value={row.field}
            onChange={(e) => update(row.key, { field: e.target.value })}
            options={CONTACT_FIELDS}
          />
          {row.field === 'attribute' && (
            <Field label={`Attribute name ${j + 1}`} value={row.attribute} onChange={(e) => update(row.key, { attribute: e.target.value })} />
          )}
          <Field
            label={`Value ${j + 1}`}
            value={row.value}
            onChange={(e) => update(row.key, { value: e.target.value })}
            error={error(`/set/${setKeyOf(row)}`)}
            hint={j === 0 ? <>Liquid, e.g. {'{{ trigger.name }}'}</> : undefined}
          />
        </>
      )}
      removeLabel={(j) => `Remove field ${j + 1} of step ${number}`}
      onRemove={(key) => onChange({ set: step.set.filter((r) => r.key !== key) })}
      error={whole}
      addLabel="Add a field"
      onAdd={() => onChange({ set: [...step.set, { key: newKey(), field: 'firstName', attribute: '', value: '' }] })}
    />
  );
}

function HttpFields({ step, number, onChange, error }: Omit<Props, 'templates'>) {
  const update = (key: string, patch: Partial<HeaderRow>) => onChange({ headers: step.headers.map((h) => (h.key === key ? { ...h, ...patch } : h)) });
  const headerProblem = (h: HeaderRow) => (h.name.trim() ? error(`/headers/${h.name.trim()}`) : undefined);
  const whole = error('/headers') && !step.headers.some((h) => headerProblem(h)) ? error('/headers') : undefined;
  return (
    <>
      <div className="step-row step-row-http">
        <SelectField
          label="Method"
          value={step.method}
          onChange={(e) => onChange({ method: e.target.value })}
          error={error('/method')}
          options={HTTP_METHODS.map((m) => ({ value: m, label: m }))}
        />
        <Field
          label="URL"
          type="url"
          value={step.url}
          onChange={(e) => onChange({ url: e.target.value })}
          error={error('/url')}
          placeholder="https://example.com/hooks/order"
          hint="Liquid allowed. Private and loopback addresses are refused unless the server allows them."
        />
      </div>
      <PairList
        rows={step.headers}
        fields={(h, j) => (
          <>
            <Field label={`Header name ${j + 1}`} value={h.name} onChange={(e) => update(h.key, { name: e.target.value })} />
            <Field label={`Header value ${j + 1}`} value={h.value} onChange={(e) => update(h.key, { value: e.target.value })} error={headerProblem(h)} />
          </>
        )}
        removeLabel={(j) => `Remove header ${j + 1} of step ${number}`}
        onRemove={(key) => onChange({ headers: step.headers.filter((x) => x.key !== key) })}
        error={whole}
        addLabel="Add a header"
        onAdd={() => onChange({ headers: [...step.headers, { key: newKey(), name: '', value: '' }] })}
      />
      <TextAreaField
        label="JSON body (optional)"
        className="code"
        rows={4}
        value={step.body}
        onChange={(e) => onChange({ body: e.target.value })}
        error={error('/body')}
        hint={<>Strings in it are Liquid, e.g. {'{"email": "{{ contact.email }}"}'}</>}
      />
    </>
  );
}

/** Rows of name/value inputs, each with its Remove button, the list's own error, and an Add button. */
function PairList<Row extends { key: string }>({
  rows,
  fields,
  removeLabel,
  onRemove,
  error,
  addLabel,
  onAdd,
}: {
  rows: Row[];
  fields: (row: Row, index: number) => ReactNode;
  /** The accessible name of a row's Remove button. */
  removeLabel: (index: number) => string;
  onRemove: (key: string) => void;
  error: string | undefined;
  addLabel: string;
  onAdd: () => void;
}) {
  return (
    <div className="pairs">
      {rows.map((row, j) => (
        <div className="pair" key={row.key}>
          {fields(row, j)}
          <button type="button" className="button-secondary" aria-label={removeLabel(j)} onClick={() => onRemove(row.key)}>
            Remove
          </button>
        </div>
      ))}
      {error && <p className="field-error">{error}</p>}
      <button type="button" className="button-secondary" onClick={onAdd}>
        {addLabel}
      </button>
    </div>
  );
}
