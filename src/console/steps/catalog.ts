// The step types as the API accepts them (API.md section 3, src/core/steps.ts), shared by the
// workflow step list (workflows/) and the automation graph editor (automations/): their names,
// labels, descriptions and fields, and the values both editors read and write the same way.

export const STEP_TYPES = ['send_email', 'send_sms', 'send_whatsapp', 'wait', 'add_tags', 'remove_tags', 'update_contact', 'http_request', 'filter'] as const;
export type StepType = (typeof STEP_TYPES)[number];

export const isStepType = (t: unknown): t is StepType => typeof t === 'string' && (STEP_TYPES as readonly string[]).includes(t);

export const STEP_LABELS: Record<StepType, string> = {
  send_email: 'Send email',
  send_sms: 'Send SMS',
  send_whatsapp: 'Send WhatsApp',
  wait: 'Wait',
  add_tags: 'Add tags',
  remove_tags: 'Remove tags',
  update_contact: 'Update contact',
  http_request: 'HTTP request',
  filter: 'Filter',
};

/** What a step of each type does, in a sentence. */
export const STEP_DESCRIPTIONS: Record<StepType, string> = {
  send_email: 'Sends an email template to the contact.',
  send_sms: 'Sends an SMS template to the contact.',
  send_whatsapp: 'Sends a WhatsApp template to the contact.',
  wait: 'Pauses the run, then goes on with the next step.',
  add_tags: 'Adds tags to the contact.',
  remove_tags: 'Removes tags from the contact.',
  update_contact: 'Sets contact fields from Liquid values.',
  http_request: 'Calls another system over HTTP.',
  filter: 'Ends the run here unless the condition holds.',
};

/** The fields a step of each type has; a 422 pointer under any other concerns the step as a whole. */
export const STEP_FIELDS: Record<StepType, string[]> = {
  send_email: ['templateId', 'to'],
  send_sms: ['templateId', 'to'],
  send_whatsapp: ['templateId', 'to'],
  wait: ['seconds'],
  add_tags: ['tags'],
  remove_tags: ['tags'],
  update_contact: ['set'],
  http_request: ['method', 'url', 'headers', 'body'],
  filter: ['condition'],
};

export type Channel = 'EMAIL' | 'SMS' | 'WHATSAPP';
export const SEND_CHANNEL: Partial<Record<string, Channel>> = { send_email: 'EMAIL', send_sms: 'SMS', send_whatsapp: 'WHATSAPP' };
/** Where a send step goes when its `to` is empty. */
export const RECIPIENT: Record<Channel, string> = { EMAIL: 'email address', SMS: 'phone number', WHATSAPP: 'phone number' };

export const HTTP_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;
export const MAX_WAIT_SECONDS = 30 * 86_400;

export const WAIT_UNITS = [
  { value: 'seconds', label: 'Seconds', factor: 1 },
  { value: 'minutes', label: 'Minutes', factor: 60 },
  { value: 'hours', label: 'Hours', factor: 3600 },
  { value: 'days', label: 'Days', factor: 86_400 },
] as const;
export type WaitUnit = (typeof WAIT_UNITS)[number]['value'];

/** The largest unit that divides the seconds evenly (3600 → 1 hour). */
export function waitParts(seconds: number): { amount: string; unit: WaitUnit } {
  for (const u of [...WAIT_UNITS].reverse()) if (seconds > 0 && seconds % u.factor === 0) return { amount: String(seconds / u.factor), unit: u.value };
  return { amount: String(seconds), unit: 'seconds' };
}

/** A wait in words, in its largest whole unit ("1 hour", "90 minutes"). */
export function durationText(seconds: number): string {
  const { amount, unit } = waitParts(seconds);
  return `${amount} ${Number(amount) === 1 ? unit.slice(0, -1) : unit}`;
}

/** Comma-separated tags as the API takes them: trimmed, without empty or repeated ones. */
export const parseTags = (value: string): string[] => [
  ...new Set(
    value
      .split(',')
      .map((t) => t.trim())
      .filter(Boolean),
  ),
];
