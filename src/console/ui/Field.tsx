import type React from 'react';
import { useId, type InputHTMLAttributes, type ReactNode, type SelectHTMLAttributes } from 'react';

/** The ids a labelled control uses: its own, and the hint and error that describe it. */
function useFieldIds(hint: ReactNode, error: string | undefined) {
  const id = useId();
  const described = [hint ? `${id}-hint` : '', error ? `${id}-error` : ''].filter(Boolean).join(' ') || undefined;
  return { id, control: { id, 'aria-invalid': error ? true : undefined, 'aria-describedby': described } } as const;
}

/** The frame of every field: label, the control, its hint and its error (a 422 pointer's message). */
function FieldFrame({ id, label, error, hint, children }: { id: string; label: string; error: string | undefined; hint?: ReactNode; children: ReactNode }) {
  return (
    <div className={`field${error ? ' field-invalid' : ''}`}>
      <label htmlFor={id}>{label}</label>
      {children}
      {hint && (
        <p className="hint" id={`${id}-hint`}>
          {hint}
        </p>
      )}
      {error && (
        <p className="field-error" id={`${id}-error`}>
          {error}
        </p>
      )}
    </div>
  );
}

interface FieldProps extends InputHTMLAttributes<HTMLInputElement> {
  label: string;
  error?: string | undefined;
  hint?: ReactNode;
}

/** A labelled input with its error (a 422 pointer's message) next to it. */
export function Field({ label, error, hint, ...input }: FieldProps) {
  const { id, control } = useFieldIds(hint, error);
  return (
    <FieldFrame id={id} label={label} error={error} hint={hint}>
      <input {...control} {...input} />
    </FieldFrame>
  );
}

interface SelectProps extends SelectHTMLAttributes<HTMLSelectElement> {
  label: string;
  error?: string | undefined;
  options: { value: string; label: string }[];
}

export function SelectField({ label, error, options, ...select }: SelectProps) {
  const { id, control } = useFieldIds(undefined, error);
  return (
    <FieldFrame id={id} label={label} error={error}>
      <select {...control} {...select}>
        {options.map((o) => (
          <option key={o.value} value={o.value}>
            {o.label}
          </option>
        ))}
      </select>
    </FieldFrame>
  );
}

interface TextAreaProps extends React.TextareaHTMLAttributes<HTMLTextAreaElement> {
  label: string;
  error?: string | undefined;
  hint?: ReactNode;
}

export function TextAreaField({ label, error, hint, ...area }: TextAreaProps) {
  const { id, control } = useFieldIds(hint, error);
  return (
    <FieldFrame id={id} label={label} error={error} hint={hint}>
      <textarea {...control} rows={5} {...area} />
    </FieldFrame>
  );
}
