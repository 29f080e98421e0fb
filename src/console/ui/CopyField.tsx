import { useId, useState } from 'react';

/** A read-only value with a Copy button (API keys, webhook URLs). */
export function CopyField({ label, value }: { label: string; value: string }) {
  const id = useId();
  const [copied, setCopied] = useState(false);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(value);
    } catch {
      // Without clipboard permission, select the text so that Ctrl+C copies it.
      (document.getElementById(id) as HTMLInputElement | null)?.select();
    }
    setCopied(true);
    setTimeout(() => setCopied(false), 2000);
  };
  return (
    <div className="field copy-field">
      <label htmlFor={id}>{label}</label>
      <div className="copy-row">
        <input id={id} readOnly value={value} onFocus={(e) => e.currentTarget.select()} />
        <button type="button" className="button-secondary" onClick={copy}>
          Copy
        </button>
      </div>
      <span className="copied" role="status">
        {copied ? 'Copied' : ''}
      </span>
    </div>
  );
}
