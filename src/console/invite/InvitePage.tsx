import { useEffect, useState, type FormEvent } from 'react';
import { api, describeError, fieldError, type ResultOf } from '../api/client';
import { Link } from 'wouter';
import { useSession } from '../app/session';
import { Alert } from '../ui/Alert';
import { Field } from '../ui/Field';

type Invitation = ResultOf<'/invitations/inspect', 'post'>;

/**
 * /invite#<token>: the token is in the fragment, which browsers never send to a server or
 * put in a Referer. New people choose a name and password; people with an account accept
 * with their own password (the token alone proves no more than access to the mailbox, and the
 * inviting admin holds it too). Either way the invitee is then signed in.
 */
export function InvitePage({ onAccepted }: { onAccepted: () => void }) {
  const { signedIn } = useSession();
  const [token] = useState(() => decodeURIComponent(window.location.hash.slice(1)));
  const [invitation, setInvitation] = useState<Invitation | null>(null);
  const [loadError, setLoadError] = useState<unknown>(null);
  const [name, setName] = useState('');
  const [password, setPassword] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [joined, setJoined] = useState<string | null>(null);

  useEffect(() => {
    document.title = 'Accept invitation · svc';
    // The token stays out of the address bar (and history) once read.
    if (window.location.hash) history.replaceState(null, '', window.location.pathname);
    if (!token) return;
    api('post', '/invitations/inspect', { body: { token } }).then(setInvitation, setLoadError);
  }, [token]);

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const body = invitation?.accountExists ? { token, password } : { token, name: name.trim(), password };
      const answer = await api('post', '/invitations/accept', { body });
      if (answer.token) {
        await signedIn({ token: answer.token });
        onAccepted();
      } else {
        setJoined(answer.workspace.name);
        setBusy(false);
      }
    } catch (err) {
      setError(err);
      setBusy(false);
    }
  };

  if (joined) {
    return (
      <main className="centered" id="main">
        <div className="card login">
          <h1>Invitation accepted</h1>
          <Alert kind="success">You are now a member of {joined}.</Alert>
          <p>
            <Link href="/app/" className="button button-primary">
              Log in
            </Link>
          </p>
        </div>
      </main>
    );
  }
  return (
    <main className="centered" id="main">
      <form className="card login" onSubmit={submit} noValidate>
        <p className="brand brand-large" aria-hidden="true">
          svc
        </p>
        <h1>Accept invitation</h1>
        {!token && <Alert>This link has no invitation in it. Open the link from your invitation email again.</Alert>}
        {loadError ? <Alert>{describeError(loadError)}</Alert> : null}
        {invitation && (
          <p>
            You are invited to join <strong>{invitation.workspaceName}</strong> as <strong>{invitation.role.toLowerCase()}</strong>, with the email{' '}
            <strong>{invitation.email}</strong>.
          </p>
        )}
        {invitation?.accountExists && <p>You already have an account: enter its password to accept, and you are signed in to this workspace.</p>}
        {invitation && !invitation.accountExists && (
          <Field label="Name" name="name" autoComplete="name" value={name} onChange={(e) => setName(e.target.value)} error={fieldError(error, '/name')} />
        )}
        {invitation && (
          // A new account's password, or the existing account's own.
          <Field
            label="Password"
            type="password"
            name="password"
            autoComplete={invitation.accountExists ? 'current-password' : 'new-password'}
            value={password}
            onChange={(e) => setPassword(e.target.value)}
            error={fieldError(error, '/password')}
            {...(invitation.accountExists ? {} : { hint: 'At least 8 characters.' })}
          />
        )}
        {error && !fieldError(error, '/name') && !fieldError(error, '/password') ? <Alert>{describeError(error)}</Alert> : null}
        {invitation && (
          <button type="submit" className="button-primary" disabled={busy}>
            Accept invitation
          </button>
        )}
      </form>
    </main>
  );
}
