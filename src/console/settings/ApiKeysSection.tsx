import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState, type FormEvent } from 'react';
import { api, describeError, fieldError } from '../api/client';
import { Alert, ErrorAlert } from '../ui/Alert';
import { ConfirmButton } from '../ui/ConfirmButton';
import { CopyField } from '../ui/CopyField';
import { DataTable } from '../ui/DataTable';
import { Field, SelectField } from '../ui/Field';
import { formatTime } from '../ui/Page';
import { LoadMore, usePagedList } from '../ui/paging';

const MINTABLE = ['VIEWER', 'MEMBER', 'ADMIN'] as const;
type MintableRole = (typeof MINTABLE)[number];
const PAGE = 50;
const roleLabel = (r: string) => r[0] + r.slice(1).toLowerCase();

export function ApiKeysSection() {
  const queries = useQueryClient();
  const { query: keys, rows } = usePagedList({
    queryKey: ['api-keys'],
    fetchPage: (cursor) => api('get', '/api-keys', { query: { limit: PAGE, cursor } }),
  });
  // The plan decides which roles a key may have (GET /billing/plan): only those are offered.
  const plan = useQuery({ queryKey: ['billing-plan'], queryFn: () => api('get', '/billing/plan') });
  const allowed = plan.data ? MINTABLE.filter((r) => plan.data.features.apiKeyRoles.includes(r)) : undefined;
  const [name, setName] = useState('');
  const [picked, setRole] = useState<MintableRole>('VIEWER');
  const role: MintableRole = allowed && !allowed.includes(picked) ? (allowed[0] ?? 'VIEWER') : picked;
  // The raw key lives here only until the person dismisses it or leaves the page.
  const [minted, setMinted] = useState<{ name: string; key: string } | null>(null);

  const create = useMutation({
    mutationFn: () => api('post', '/api-keys', { body: { name: name.trim(), role } }),
    onSuccess: (key) => {
      setMinted({ name: key.name, key: key.key });
      setName('');
      void queries.invalidateQueries({ queryKey: ['api-keys'] });
    },
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    setMinted(null);
    create.mutate();
  };
  const nameError = fieldError(create.error, '/name');
  const roleError = fieldError(create.error, '/role');

  return (
    <section aria-labelledby="api-keys-heading">
      <h2 id="api-keys-heading">API keys</h2>
      <p>Keys let scripts and other systems call the API with a role of their own. A key is shown once, when it is created.</p>
      {minted && (
        <div className="card minted">
          <Alert kind="warning">Copy the key “{minted.name}” now and keep it somewhere safe: it will not be shown again.</Alert>
          <CopyField label="New API key" value={minted.key} />
          <button type="button" className="button-secondary" onClick={() => setMinted(null)}>
            Done
          </button>
        </div>
      )}
      <form className="card form inline-form" onSubmit={submit} noValidate aria-label="Create an API key">
        <Field label="Name" value={name} onChange={(e) => setName(e.target.value)} error={nameError} required maxLength={100} />
        <SelectField
          label="Role"
          value={role}
          onChange={(e) => setRole(e.target.value as MintableRole)}
          error={roleError}
          options={(allowed ?? MINTABLE).map((r) => ({ value: r, label: roleLabel(r) }))}
        />
        {allowed && allowed.length < MINTABLE.length && plan.data && (
          <p className="hint">
            On the {roleLabel(plan.data.plan)} plan a key may be {allowed.map(roleLabel).join(' or ')};{' '}
            {MINTABLE.filter((r) => !allowed.includes(r))
              .map(roleLabel)
              .join(' and ')}{' '}
            keys need a higher plan (see Billing).
          </p>
        )}
        <button type="submit" className="button-primary" disabled={create.isPending}>
          Create API key
        </button>
      </form>
      {create.error && !nameError && !roleError ? <Alert>{describeError(create.error)}</Alert> : null}
      <ErrorAlert error={keys.error} />
      <DataTable
        caption="API keys"
        rows={rows}
        rowKey={(k) => k.id}
        empty="No API keys yet."
        columns={[
          { header: 'Name', cell: (k) => k.name },
          { header: 'Role', cell: (k) => k.role.toLowerCase() },
          { header: 'Key', cell: (k) => <code>{k.prefix}…</code> },
          { header: 'Created', cell: (k) => formatTime(k.createdAt) },
          { header: 'Last used', cell: (k) => formatTime(k.lastUsedAt) },
          {
            header: 'Status',
            cell: (k) => (k.revokedAt ? <span className="badge badge-muted">revoked</span> : <span className="badge badge-ok">active</span>),
          },
        ]}
        actions={(k) =>
          !k.revokedAt && (
            <ConfirmButton
              label="Revoke"
              ariaLabel={`Revoke ${k.name}`}
              question={`Revoke the key “${k.name}”? Anything using it stops working within seconds.`}
              onConfirm={async () => {
                await api('delete', '/api-keys/{id}', { params: { id: k.id } });
                await queries.invalidateQueries({ queryKey: ['api-keys'] });
              }}
            />
          )
        }
      />
      <LoadMore query={keys} />
    </section>
  );
}
