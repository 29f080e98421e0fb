import { useMutation, useQueryClient } from '@tanstack/react-query';
import { useState, type FormEvent } from 'react';
import { api, ApiError, describeError, fieldError, type ResultOf } from '../api/client';
import { useCan, useMe, type Role } from '../app/session';
import { Alert, ErrorAlert } from '../ui/Alert';
import { ConfirmButton } from '../ui/ConfirmButton';
import { CopyField } from '../ui/CopyField';
import { DataTable } from '../ui/DataTable';
import { Field, SelectField } from '../ui/Field';
import { formatTime } from '../ui/Page';
import { LoadMore, usePagedList } from '../ui/paging';

type Member = ResultOf<'/memberships', 'get'>['data'][number];

const ROLES: Role[] = ['VIEWER', 'MEMBER', 'ADMIN', 'OWNER'];
const PAGE = 50;
const label = (r: string) => r[0] + r.slice(1).toLowerCase();

export function MembersSection() {
  const me = useMe();
  const isAdmin = useCan('ADMIN');
  const isOwner = me.role === 'OWNER';
  // Only an OWNER grants or removes OWNER.
  const grantable = ROLES.filter((r) => r !== 'OWNER' || isOwner);
  const queries = useQueryClient();
  const { query: members, rows: memberRows } = usePagedList({
    queryKey: ['memberships'],
    fetchPage: (cursor) => api('get', '/memberships', { query: { limit: PAGE, cursor } }),
  });
  const { query: pending, rows: invitationRows } = usePagedList({
    queryKey: ['invitations'],
    fetchPage: (cursor) => api('get', '/memberships/invitations', { query: { limit: PAGE, cursor } }),
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
  const pendingRows = invitationRows ?? [];
  const editable = (m: Member) => isAdmin && m.userId !== me.user.id && (m.role !== 'OWNER' || isOwner);

  return (
    <section aria-labelledby="members-heading">
      <h2 id="members-heading">Members</h2>
      <ErrorAlert error={members.error} />
      {rowError ? <Alert>{describeError(rowError)}</Alert> : null}
      <DataTable
        caption="Members"
        rows={memberRows}
        rowKey={(m) => m.id}
        columns={[
          { header: 'Name', cell: (m) => m.name ?? '—' },
          { header: 'Email', cell: (m) => m.email },
          {
            header: 'Role',
            cell: (m) =>
              editable(m) ? (
                <select aria-label={`Role of ${m.email}`} value={m.role} onChange={(e) => void changeRole(m.id, e.target.value as Role)}>
                  {grantable.map((r) => (
                    <option key={r} value={r}>
                      {label(r)}
                    </option>
                  ))}
                </select>
              ) : (
                label(m.role)
              ),
          },
          { header: 'Member since', cell: (m) => formatTime(m.createdAt) },
        ]}
        actions={
          isAdmin &&
          ((m) =>
            editable(m) && (
              <ConfirmButton
                label="Remove"
                ariaLabel={`Remove ${m.email}`}
                question={`Remove ${m.email} from this workspace? They lose access at once.`}
                onConfirm={async () => {
                  await api('delete', '/memberships/{id}', { params: { id: m.id } });
                  await queries.invalidateQueries({ queryKey: ['memberships'] });
                }}
              />
            ))
        }
      />
      <LoadMore query={members} label="Load more members" />

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
              <DataTable
                caption="Pending invitations"
                rows={pendingRows}
                rowKey={(p) => p.id}
                columns={[
                  { header: 'Email', cell: (p) => p.email },
                  { header: 'Role', cell: (p) => label(p.role) },
                  { header: 'Expires', cell: (p) => formatTime(p.expiresAt) },
                ]}
                actions={(p) => (
                  <ConfirmButton
                    label="Cancel invitation"
                    ariaLabel={`Cancel invitation for ${p.email}`}
                    question={`Cancel the invitation of ${p.email}? The link stops working.`}
                    onConfirm={async () => {
                      await api('delete', '/memberships/invitations/{id}', { params: { id: p.id } });
                      await queries.invalidateQueries({ queryKey: ['invitations'] });
                    }}
                  />
                )}
              />
              <LoadMore query={pending} label="Load more invitations" />
            </>
          )}
          {pending.error instanceof ApiError && pending.error.status !== 404 ? <ErrorAlert error={pending.error} /> : null}
        </>
      )}
    </section>
  );
}
