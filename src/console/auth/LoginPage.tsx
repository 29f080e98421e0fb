import { useEffect, useState, type FormEvent } from 'react';
import { ApiError, NetworkError, waitText } from '../api/client';
import { useSession } from '../app/session';
import { Alert } from '../ui/Alert';
import { Field } from '../ui/Field';

function loginMessage(err: unknown): string {
  if (err instanceof NetworkError) return err.message;
  if (err instanceof ApiError) {
    if (err.status === 401) return 'The email or password is not right.';
    if (err.status === 429) return `Too many attempts. Try again in ${waitText(err.retryAfter)}.`;
    if (err.status === 422 || err.status === 400) return 'Enter your email and password.';
    return err.detail;
  }
  return 'Something went wrong. Try again.';
}

export function LoginPage({ reason }: { reason?: string | undefined }) {
  const { logIn } = useSession();
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    document.title = 'Log in · svc';
  }, []);

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await logIn(email.trim(), password);
    } catch (err) {
      setError(loginMessage(err));
      setBusy(false);
    }
  };

  return (
    <main className="centered" id="main">
      <form className="card login" onSubmit={submit} noValidate>
        <p className="brand brand-large" aria-hidden="true">
          svc
        </p>
        <h1>Log in</h1>
        {reason && !error && <Alert kind="info">{reason}</Alert>}
        {error && <Alert>{error}</Alert>}
        <Field label="Email" type="email" name="email" autoComplete="username" required value={email} onChange={(e) => setEmail(e.target.value)} autoFocus />
        <Field
          label="Password"
          type="password"
          name="password"
          autoComplete="current-password"
          required
          value={password}
          onChange={(e) => setPassword(e.target.value)}
        />
        <button type="submit" className="button-primary" disabled={busy}>
          {busy ? 'Logging in…' : 'Log in'}
        </button>
      </form>
    </main>
  );
}
