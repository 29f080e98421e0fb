// The workflow editor's form of a step (strings for inputs) with its conversion to and from the
// API shape; the step types themselves (labels, descriptions, fields) are in ../steps/catalog.

import { durationText, isStepType, parseTags, WAIT_UNITS, waitParts, type StepType, type WaitUnit } from '../steps/catalog';

export const CONTACT_FIELDS = [
  { value: 'firstName', label: 'First name' },
  { value: 'lastName', label: 'Last name' },
  { value: 'email', label: 'Email' },
  { value: 'phone', label: 'Phone' },
  { value: 'attribute', label: 'Attribute…' },
];

export interface SetRow {
  key: string;
  field: string;
  attribute: string;
  value: string;
}

export interface HeaderRow {
  key: string;
  name: string;
  value: string;
}

/** One step as the editor holds it: every input's text; only the fields of its type count. */
export interface StepDraft {
  key: string;
  type: StepType;
  templateId: string;
  to: string;
  amount: string;
  unit: WaitUnit;
  tags: string;
  set: SetRow[];
  method: string;
  url: string;
  headers: HeaderRow[];
  body: string;
  condition: string;
}

/** A field problem relative to its step ("/templateId"), as a 422 pointer is under /steps/N. */
export interface StepProblem {
  path: string;
  message: string;
}

let counter = 0;
export const newKey = (): string => `k${++counter}`;

export function blankStep(type: StepType): StepDraft {
  return {
    key: newKey(),
    type,
    templateId: '',
    to: '',
    amount: type === 'wait' ? '1' : '',
    unit: type === 'wait' ? 'hours' : 'seconds',
    tags: '',
    set: type === 'update_contact' ? [{ key: newKey(), field: 'firstName', attribute: '', value: '' }] : [],
    method: 'POST',
    url: '',
    headers: [],
    body: '',
    condition: '',
  };
}

const text = (v: unknown): string => (typeof v === 'string' ? v : v === undefined || v === null ? '' : String(v));

export function fromApi(step: Record<string, unknown>): StepDraft {
  const type = isStepType(step.type) ? step.type : 'add_tags';
  const draft = blankStep(type);
  switch (type) {
    case 'send_email':
    case 'send_sms':
    case 'send_whatsapp':
      return { ...draft, templateId: text(step.templateId), to: text(step.to) };
    case 'wait':
      return { ...draft, ...(typeof step.seconds === 'number' ? waitParts(step.seconds) : { amount: text(step.seconds), unit: 'seconds' }) };
    case 'add_tags':
    case 'remove_tags':
      return { ...draft, tags: Array.isArray(step.tags) ? step.tags.map(text).join(', ') : '' };
    case 'update_contact': {
      const set = step.set && typeof step.set === 'object' ? Object.entries(step.set as Record<string, unknown>) : [];
      return {
        ...draft,
        set: set.map(([k, v]) => {
          const attr = /^attributes\.(.+)$/.exec(k);
          return { key: newKey(), field: attr ? 'attribute' : k, attribute: attr ? attr[1]! : '', value: text(v) };
        }),
      };
    }
    case 'http_request': {
      const headers = step.headers && typeof step.headers === 'object' ? Object.entries(step.headers as Record<string, unknown>) : [];
      return {
        ...draft,
        method: text(step.method) || 'POST',
        url: text(step.url),
        headers: headers.map(([name, value]) => ({ key: newKey(), name, value: text(value) })),
        body: step.body === undefined ? '' : JSON.stringify(step.body, null, 2),
      };
    }
    case 'filter':
      return { ...draft, condition: text(step.condition) };
  }
}

/** The key update_contact's `set` uses for a row ("firstName", "attributes.plan"). */
export const setKeyOf = (row: SetRow): string => (row.field === 'attribute' ? `attributes.${row.attribute.trim()}` : row.field);

/**
 * The step as the API takes it, and what the editor itself can tell is wrong (a body that
 * is not JSON, a header without a name). Everything else is left to the API's 422.
 */
export function toApi(d: StepDraft): { step: Record<string, unknown>; problems: StepProblem[] } {
  const problems: StepProblem[] = [];
  const step: Record<string, unknown> = { type: d.type };
  switch (d.type) {
    case 'send_email':
    case 'send_sms':
    case 'send_whatsapp':
      if (d.templateId !== '') step.templateId = Number(d.templateId);
      if (d.to.trim()) step.to = d.to.trim();
      break;
    case 'wait': {
      const factor = WAIT_UNITS.find((u) => u.value === d.unit)?.factor ?? 1;
      const amount = Number(d.amount);
      if (d.amount.trim() === '' || !Number.isFinite(amount)) problems.push({ path: '/seconds', message: 'Enter a number' });
      else step.seconds = Math.round(amount * factor * 1000) / 1000;
      break;
    }
    case 'add_tags':
    case 'remove_tags':
      step.tags = parseTags(d.tags);
      break;
    case 'update_contact': {
      const set: Record<string, string> = {};
      for (const row of d.set) {
        if (row.field === 'attribute' && !row.attribute.trim()) {
          problems.push({ path: `/set/${setKeyOf(row)}`, message: 'Name the attribute' });
          continue;
        }
        set[setKeyOf(row)] = row.value;
      }
      step.set = set;
      break;
    }
    case 'http_request': {
      step.method = d.method;
      step.url = d.url.trim();
      if (d.headers.length) {
        const headers: Record<string, string> = {};
        for (const h of d.headers) {
          if (!h.name.trim()) problems.push({ path: '/headers', message: 'Every header needs a name' });
          else headers[h.name.trim()] = h.value;
        }
        step.headers = headers;
      }
      if (d.body.trim()) {
        try {
          step.body = JSON.parse(d.body);
        } catch {
          problems.push({ path: '/body', message: 'Not valid JSON' });
        }
      }
      break;
    }
    case 'filter':
      step.condition = d.condition;
      break;
  }
  return { step, problems };
}

/** One line saying what a step does, for the read-only list. */
export function describeStep(d: StepDraft, templateName: (id: number) => string | undefined): string {
  switch (d.type) {
    case 'send_email':
    case 'send_sms':
    case 'send_whatsapp': {
      const id = Number(d.templateId);
      const name = d.templateId ? (templateName(id) ?? `template ${id}`) : 'no template';
      return `${name}${d.to ? ` to ${d.to}` : ''}`;
    }
    case 'wait': {
      const factor = WAIT_UNITS.find((u) => u.value === d.unit)?.factor ?? 1;
      return `for ${durationText(Number(d.amount) * factor)}`;
    }
    case 'add_tags':
    case 'remove_tags':
      return parseTags(d.tags).join(', ');
    case 'update_contact':
      return d.set.map((r) => `${setKeyOf(r)} = ${r.value}`).join('; ');
    case 'http_request':
      return `${d.method} ${d.url}`;
    case 'filter':
      return `continue only if ${d.condition}`;
  }
}
