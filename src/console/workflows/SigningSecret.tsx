import { useMutation } from '@tanstack/react-query';
import { useState, type FormEvent } from 'react';
import { api, describeError, fieldError } from '../api/client';
import { Alert } from '../ui/Alert';
import { ConfirmButton } from '../ui/ConfirmButton';
import { CopyField } from '../ui/CopyField';
import { Field } from '../ui/Field';
import type { WorkflowSectionProps } from './types';

/** 32 random bytes from the browser's CSPRNG, base64url (43 characters). */
export function generateSecret(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  return btoa(String.fromCharCode(...bytes))
    .replaceAll('+', '-')
    .replaceAll('/', '_')
    .replace(/=+$/, '');
}

/**
 * The webhook's signing secret: generate (shown once, with Copy), rotate, set one's own, or
 * clear. The API keeps it write-only; this page keeps a generated one in memory until
 * Done or until the page is left, and never shows it again.
 */
export function SigningSecret({ workflow, onSaved }: Pick<WorkflowSectionProps, 'workflow' | 'onSaved'>) {
  const has = workflow.webhook.hasSigningSecret;
  const [own, setOwn] = useState('');
  const [minted, setMinted] = useState<string | null>(null);
  const [message, setMessage] = useState<string | null>(null);
  const save = useMutation({
    mutationFn: (signingSecret: string | null) => api('patch', '/workflows/{id}', { params: { id: workflow.id }, body: { webhook: { signingSecret } } }),
    onSuccess: (w) => onSaved(w),
  });

  const generate = async () => {
    const secret = generateSecret();
    setMessage(null);
    setMinted(null);
    await save.mutateAsync(secret);
    save.reset();
    setMinted(secret);
  };
  const submitOwn = (e: FormEvent) => {
    e.preventDefault();
    setMessage(null);
    setMinted(null);
    save.mutate(own, {
      onSuccess: () => {
        setOwn('');
        setMessage('The signing secret is set.');
      },
    });
  };
  const clear = async () => {
    setMinted(null);
    setMessage(null);
    await save.mutateAsync(null);
    setMessage('The signing secret is cleared.');
  };
  const ownError = fieldError(save.error, '/webhook/signingSecret');

  return (
    <section className="card" aria-labelledby="signing-heading">
      <h2 id="signing-heading">Request signing</h2>
      <p className="signing-state">
        {has ? (
          <>
            <span className="badge badge-ok">Signed</span> Every POST must carry <code>x-service-signature: sha256=…</code>, the HMAC-SHA256 of its exact body
            with the secret; others are refused (401).
          </>
        ) : (
          <>
            <span className="badge badge-warn">Unsigned</span> No signing secret: anyone who has the URL can post to it.
          </>
        )}
      </p>
      {minted && (
        <div className="minted secret-minted">
          <Alert kind="warning">
            Copy the signing secret now and give it to the sender: it is not shown again. svc keeps it encrypted and only says whether one is set.
          </Alert>
          <CopyField label="New signing secret" value={minted} />
          <button type="button" className="button-secondary" onClick={() => setMinted(null)}>
            Done
          </button>
        </div>
      )}
      {message && <Alert kind="success">{message}</Alert>}
      {save.error && !ownError ? <Alert>{describeError(save.error)}</Alert> : null}
      <div className="secret-actions">
        {has ? (
          <>
            <ConfirmButton
              label="Rotate secret"
              className="button-secondary"
              question="Rotate the signing secret? A new one is generated and shown once; the current one stops working at once, so senders must switch to the new one."
              onConfirm={generate}
            />
            <ConfirmButton label="Clear secret" question="Clear the signing secret? Unsigned posts to this URL will then be accepted." onConfirm={clear} />
          </>
        ) : (
          <button type="button" className="button-primary" disabled={save.isPending} onClick={() => void generate().catch(() => undefined)}>
            Generate secret
          </button>
        )}
      </div>
      <form className="inline-form secret-form" noValidate aria-label="Use your own signing secret" onSubmit={submitOwn}>
        <Field
          label="Signing secret"
          type="password"
          autoComplete="new-password"
          value={own}
          onChange={(e) => setOwn(e.target.value)}
          error={ownError}
          hint={
            has
              ? 'Or paste one you already use: it replaces the current secret at once.'
              : 'Or paste one you already use, at least 16 characters. Senders sign each body with it.'
          }
        />
        <button type="submit" className="button-secondary" disabled={save.isPending || !own}>
          Set secret
        </button>
      </form>
    </section>
  );
}
