import { useRef, useState, type ReactNode } from 'react';
import { describeError } from '../api/client';

interface Props {
  /** The button's text, also the confirming button's. */
  label: string;
  /** What will happen, asked as a question. */
  question: ReactNode;
  onConfirm: () => Promise<unknown>;
  className?: string;
  /** An accessible name when the visible label is shared by several rows. */
  ariaLabel?: string;
}

/** A destructive action, asked again in a modal dialog before it is done. */
export function ConfirmButton({ label, question, onConfirm, className = 'button-danger', ariaLabel }: Props) {
  const dialog = useRef<HTMLDialogElement>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const confirm = async () => {
    setBusy(true);
    setError(null);
    try {
      await onConfirm();
      dialog.current?.close();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <>
      <button type="button" className={className} aria-label={ariaLabel} onClick={() => dialog.current?.showModal()}>
        {label}
      </button>
      <dialog ref={dialog} className="confirm" aria-label={`Confirm: ${label}`}>
        <p>{question}</p>
        {error ? (
          <p className="field-error" role="alert">
            {describeError(error)}
          </p>
        ) : null}
        <div className="actions">
          <button type="button" className="button-secondary" onClick={() => dialog.current?.close()}>
            Cancel
          </button>
          <button type="button" className="button-danger" disabled={busy} onClick={confirm}>
            {label}
          </button>
        </div>
      </dialog>
    </>
  );
}
