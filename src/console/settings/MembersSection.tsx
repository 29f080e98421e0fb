import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState, type FormEvent } from 'react';
import { api, ApiError, describeError, fieldError } from '../api/client';
import { useCan, useMe, type Role } from '../app/session';
import { Alert, ErrorAlert } from '../ui/Alert';
import { ConfirmButton } from '../ui/ConfirmButton';
import { CopyField } from '../ui/CopyField';
import { Field, SelectField } from '../ui/Field';
import { formatTime } from '../ui/Page';

const ROLES: Role[] = ['VIEWER', 'MEMBER', 'ADMIN', 'OWNER'];
const label = (r: string) => r[0] + r.slice(1).toLowerCase();

export function MembersSection() {
  const me = useMe();
  const isAdmin = useCan('ADMIN');
  const isOwner = me.role === 'OWNER';
  // Only an OWNER grants or removes OWNER.
  const grantable = ROLES.filter((r) => r !== 'OWNER' || isOwner);
  const queries = useQueryClient();
  const members = useQuery({ queryKey: ['memberships'], queryFn: () => api('get', '/memberships', { query: { limit: 200 } }) });
  const pending = useQuery({
    queryKey: ['invitations'],
    queryFn: () => api('get', '/memberships/invitations', { query: { limit: 200 } }),
    enabled: isAdmin,
    retry: false,
  });
  const [email, setEmail] = useState('');
  const [role, setRole] = useState<Role>('MEMBER');
  const [link, setLink] = useState<{ email: string; url: string } | null>(null);
  const [rowError, setRowError] = useState<unknown>(null);

  const invite = useMutation({
    mutationFn: () => api('post', '/memberships/invitations', { body: { email: email.trim(), role } }),
    onSuccess: (inv) => {
      setLink({ email: inv.email, url: `${window.location.origin}/invite#${inv.token}` });
      setEmail('');
      void queries.invalidateQueries({ queryKey: ['invitations'] });
    },
  });
  const changeRole = async (id: number, newRole: Role) => {
    setRowError(null);
    try {
      await api('patch', '/memberships/{id}', { params: { id }, body: { role: newRole } });
    } catch (err) {
      setRowError(err);
    }
    await queries.invalidateQueries({ queryKey: ['memberships'] });
  };
  const submit = (e: FormEvent) => {
    e.preventDefault();
    setLink(null);
    invite.mutate();
  };
  const emailError = fieldError(invite.error, '/email');
  const pendingRows = pending.data?.data ?? [];

  return (
    <section aria-labelledby="members-heading">
      <h2 id="members-heading">Members</h2>
      <ErrorAlert error={members.error} />
      {rowError ? <Alert>{describeError(rowError)}</Alert> : null}
      {members.data && (
        <table className="table">
          <caption className="visually-hidden">Members</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Email</th>
              <th scope="col">Role</th>
              <th scope="col">Member since</th>
              {isAdmin && (
                <th scope="col">
                  <span className="visually-hidden">Actions</span>
                </th>
              )}
            </tr>
          </thead>
          <tbody>
            {members.data.data.map((m) => {
              const editable = isAdmin && m.userId !== me.user.id && (m.role !== 'OWNER' || isOwner);
              return (
                <tr key={m.id}>
                  <td>{m.name ?? '—'}</td>
                  <td>{m.email}</td>
                  <td>
                    {editable ? (
                      <select aria-label={`Role of ${m.email}`} value={m.role} onChange={(e) => void changeRole(m.id, e.target.value as Role)}>
                        {grantable.map((r) => (
                          <option key={r} value={r}>
                            {label(r)}
                          </option>
                        ))}
                      </select>
                    ) : (
                      label(m.role)
                    )}
                  </td>
                  <td>{formatTime(m.createdAt)}</td>
                  {isAdmin && (
                    <td>
                      {editable && (
                        <ConfirmButton
                          label="Remove"
                          ariaLabel={`Remove ${m.email}`}
                          question={`Remove ${m.email} from this workspace? They lose access at once.`}
                          onConfirm={async () => {
                            await api('delete', '/memberships/{id}', { params: { id: m.id } });
                            await queries.invalidateQueries({ queryKey: ['memberships'] });
                          }}
                        />
                      )}
                    </td>
                  )}
                </tr>
              );
            })}
          </tbody>
        </table>
      )}

      {isAdmin && (
        <>
          <h2>Invite</h2>
          {link && (
            <div className="card minted">
              <Alert kind="success">
                {link.email} is invited; an email with this link is on its way. You can also send the link yourself: it is shown only now.
              </Alert>
              <CopyField label="Invitation link" value={link.url} />
            </div>
          )}
          <form className="card form inline-form" onSubmit={submit} noValidate aria-label="Invite a member">
            <Field label="Email" type="email" autoComplete="off" value={email} onChange={(e) => setEmail(e.target.value)} error={emailError} required />
            <SelectField
              label="Role"
              value={role}
              onChange={(e) => setRole(e.target.value as Role)}
              options={grantable.map((r) => ({ value: r, label: label(r) }))}
            />
            <button type="submit" className="button-primary" disabled={invite.isPending}>
              Invite
            </button>
          </form>
          {invite.error && !emailError ? <Alert>{describeError(invite.error)}</Alert> : null}
          {pendingRows.length > 0 && (
            <>
              <h2>Pending invitations</h2>
              <table className="table">
                <caption className="visually-hidden">Pending invitations</caption>
                <thead>
                  <tr>
                    <th scope="col">Email</th>
                    <th scope="col">Role</th>
                    <th scope="col">Expires</th>
                    <th scope="col">
                      <span className="visually-hidden">Actions</span>
                    </th>
                  </tr>
                </thead>
                <tbody>
                  {pendingRows.map((p) => (
                    <tr key={p.id}>
                      <td>{p.email}</td>
                      <td>{label(p.role)}</td>
                      <td>{formatTime(p.expiresAt)}</td>
                      <td>
                        <ConfirmButton
                          label="Cancel invitation"
                          ariaLabel={`Cancel invitation for ${p.email}`}
                          question={`Cancel the invitation of ${p.email}? The link stops working.`}
                          onConfirm={async () => {
                            await api('delete', '/memberships/invitations/{id}', { params: { id: p.id } });
                            await queries.invalidateQueries({ queryKey: ['invitations'] });
                          }}
                        />
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </>
          )}
          {pending.error instanceof ApiError && pending.error.status !== 404 ? <ErrorAlert error={pending.error} /> : null}
        </>
      )}
    </section>
  );
}
