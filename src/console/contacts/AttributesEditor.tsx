// A contact's `attributes` (a JSON object of custom fields) as rows of name and value. Values
// are typed as text; a value that reads as JSON (a number, true/false, null, an array or an
// object) is saved as that. Each existing value is shown so that it reads back as itself
// (a string that would read as JSON is shown in quotes), and a row left as it was is not sent
// at all, so that values of any type survive an edit unchanged.
import { Fragment } from 'react';
import { flushSync } from 'react-dom';
import { ApiError } from '../api/client';

export type Attributes = Record<string, unknown>;

export interface AttributeRow {
  /** React key, never shown. */
  id: number;
  name: string;
  value: string;
  /** The name and the shown value it was loaded with (undefined for an added row). */
  originalName?: string;
  originalValue?: string;
}

export interface RowProblem {
  name?: string;
  value?: string;
}

export interface AttributeProblems {
  /** About the whole object (the API's `/attributes` pointer: its size, its depth). */
  group?: string;
  rows: Record<number, RowProblem>;
}

export const NO_PROBLEMS: AttributeProblems = { rows: {} };

export const hasProblems = (p: AttributeProblems) => p.group !== undefined || Object.keys(p.rows).length > 0;

let nextId = 1;
export const newRow = (): AttributeRow => ({ id: nextId++, name: '', value: '' });

/** The text that shows a value and reads back as the same value (see readValue). */
export function showValue(value: unknown): string {
  if (typeof value !== 'string') return JSON.stringify(value);
  try {
    JSON.parse(value);
  } catch {
    return value;
  }
  return JSON.stringify(value);
}

/** A typed value: JSON when it reads as JSON (a quoted string is that string), else the text itself. */
export function readValue(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

export function rowsOf(attributes: Attributes): AttributeRow[] {
  return Object.entries(attributes).map(([name, value]) => {
    const shown = showValue(value);
    return { id: nextId++, name, value: shown, originalName: name, originalValue: shown };
  });
}

/** The key a row saves under: its loaded name when untouched (even with spaces), else the trimmed name. */
const keyOf = (row: AttributeRow) => (row.originalName !== undefined && row.name === row.originalName ? row.name : row.name.trim());

const pointerOf = (key: string) => `/attributes/${key.replace(/~/g, '~0').replace(/\//g, '~1')}`;

/**
 * What to send for the rows, or the problems that keep them from being sent. A new contact
 * sends the whole object. An edit sends a JSON Merge Patch, as PATCH /contacts/:id merges
 * `attributes` one level deep: the added or changed names with their values, a removed (or
 * renamed) name as null; names left as they were are not sent. PATCH cannot store a null
 * (it removes the name), so an edit refuses a null value at the row.
 */
export function attributesToSend(
  rows: AttributeRow[],
  original: Attributes | null,
): { ok: true; attributes: Attributes | undefined } | { ok: false; problems: AttributeProblems } {
  const problems: AttributeProblems = { rows: {} };
  const seen = new Set<string>();
  const out: Attributes = {};
  const changed: Attributes = {};
  for (const row of rows) {
    const key = keyOf(row);
    const at: RowProblem = {};
    // An empty name the contact already has (the API takes one) is kept as it is.
    if (key === '' && row.originalName !== '') at.name = 'Enter a name, or remove this row.';
    else if (seen.has(key)) at.name = `Another row is already named “${key}”.`;
    seen.add(key);
    const value = readValue(row.value);
    const untouched = original !== null && Object.hasOwn(original, key) && showValue(original[key]) === row.value;
    if (!untouched) {
      if (typeof value === 'number' && /^\s*-?\d+\s*$/.test(row.value) && !Number.isSafeInteger(value)) {
        at.value = 'This number is too large to keep exactly. Put it in quotes to keep it as text.';
      } else if (value === null && original !== null) {
        at.value = 'An edit cannot save null (it would remove the attribute). Use Remove, or write "null" in quotes to keep it as text.';
      }
      changed[key] = value;
    }
    out[key] = value;
    if (at.name || at.value) problems.rows[row.id] = at;
  }
  if (hasProblems(problems)) return { ok: false, problems };
  if (original === null) return { ok: true, attributes: rows.length ? out : undefined };
  for (const key of Object.keys(original)) if (!Object.hasOwn(out, key)) changed[key] = null;
  return { ok: true, attributes: Object.keys(changed).length ? changed : undefined };
}

const capitalised = (message: string) => message.charAt(0).toUpperCase() + message.slice(1);

/** A 422's `/attributes` errors: at the row whose name the pointer names, else for the whole group. */
export function apiProblems(err: unknown, rows: AttributeRow[]): AttributeProblems {
  const problems: AttributeProblems = { rows: {} };
  if (!(err instanceof ApiError)) return problems;
  for (const e of err.errors) {
    if (e.path !== '/attributes' && !e.path.startsWith('/attributes/')) continue;
    const row = e.path === '/attributes' ? undefined : rows.find((r) => e.path === pointerOf(keyOf(r)) || e.path.startsWith(`${pointerOf(keyOf(r))}/`));
    if (row) problems.rows[row.id] = { ...problems.rows[row.id], value: capitalised(e.message) };
    else problems.group = problems.group ? `${problems.group} ${capitalised(e.message)}` : capitalised(e.message);
  }
  return problems;
}

export function mergeProblems(a: AttributeProblems, b: AttributeProblems): AttributeProblems {
  const rows: Record<number, RowProblem> = { ...a.rows };
  for (const [id, p] of Object.entries(b.rows)) rows[Number(id)] = { ...rows[Number(id)], ...p };
  const group = [a.group, b.group].filter(Boolean).join(' ') || undefined;
  return group === undefined ? { rows } : { group, rows };
}

interface EditorProps {
  rows: AttributeRow[];
  onChange: (rows: AttributeRow[]) => void;
  problems: AttributeProblems;
  /** An edit (PATCH) rather than a new contact: a null value cannot be saved. */
  editing: boolean;
}

/** The rows, each with its name, value and Remove; Add attribute below. */
export function AttributesEditor({ rows, onChange, problems, editing }: EditorProps) {
  const update = (id: number, patch: Partial<AttributeRow>) => onChange(rows.map((r) => (r.id === id ? { ...r, ...patch } : r)));
  const add = () => {
    const row = newRow();
    // Rendered at once, and focused within this click: focusing it on a later frame could
    // move the focus away from a field the user has meanwhile moved to and typed into.
    flushSync(() => onChange([...rows, row]));
    document.getElementById(`attribute-${row.id}-name`)?.focus();
  };
  return (
    <fieldset className="attributes" aria-describedby={`attributes-hint${problems.group ? ' attributes-error' : ''}`}>
      <legend>Attributes</legend>
      <p className="hint" id="attributes-hint">
        Values are text. A value that reads as JSON (a number such as <code>42</code>, <code>true</code> or <code>false</code>,{' '}
        {editing ? null : (
          <>
            <code>null</code>,{' '}
          </>
        )}
        an <code>[array]</code> or an <code>{'{object}'}</code>) is saved as that; put text in double quotes (<code>"42"</code>) to keep it as text.
      </p>
      {problems.group && (
        <p className="field-error" id="attributes-error">
          {problems.group}
        </p>
      )}
      {rows.length > 0 && (
        <div className="attribute-head" aria-hidden="true">
          <span>Attribute name</span>
          <span>Attribute value</span>
        </div>
      )}
      <ol className="attribute-rows">
        {rows.map((row, i) => {
          const n = i + 1;
          const p = problems.rows[row.id] ?? {};
          const base = `attribute-${row.id}`;
          return (
            <li key={row.id} className="attribute-row">
              <div className="attribute-cell">
                <input
                  id={`${base}-name`}
                  aria-label={`Name of attribute ${n}`}
                  autoComplete="off"
                  spellCheck={false}
                  value={row.name}
                  onChange={(e) => update(row.id, { name: e.target.value })}
                  aria-invalid={p.name ? true : undefined}
                  aria-describedby={p.name ? `${base}-name-error` : undefined}
                />
                {p.name && (
                  <p className="field-error" id={`${base}-name-error`}>
                    {p.name}
                  </p>
                )}
              </div>
              <div className="attribute-cell">
                <input
                  id={`${base}-value`}
                  aria-label={`Value of attribute ${n}`}
                  autoComplete="off"
                  spellCheck={false}
                  value={row.value}
                  onChange={(e) => update(row.id, { value: e.target.value })}
                  aria-invalid={p.value ? true : undefined}
                  aria-describedby={p.value ? `${base}-value-error attributes-hint` : 'attributes-hint'}
                />
                {p.value && (
                  <p className="field-error" id={`${base}-value-error`}>
                    {p.value}
                  </p>
                )}
              </div>
              <button
                type="button"
                className="button-secondary"
                aria-label={`Remove attribute ${n}`}
                onClick={() => onChange(rows.filter((r) => r.id !== row.id))}
              >
                Remove
              </button>
            </li>
          );
        })}
      </ol>
      <button type="button" className="button-secondary" onClick={add}>
        Add attribute
      </button>
    </fieldset>
  );
}

/** The attributes for a reader (VIEWER): names and values, no inputs. */
export function AttributesList({ attributes }: { attributes: Attributes }) {
  const entries = Object.entries(attributes);
  return (
    <section className="attributes" aria-labelledby="attributes-title">
      <h2 id="attributes-title">Attributes</h2>
      {entries.length === 0 ? (
        <p className="meta">No attributes.</p>
      ) : (
        <dl className="facts attribute-list">
          {entries.map(([name, value]) => (
            <Fragment key={name}>
              <dt>{name}</dt>
              <dd>{typeof value === 'string' ? value : <code>{JSON.stringify(value)}</code>}</dd>
            </Fragment>
          ))}
        </dl>
      )}
    </section>
  );
}
