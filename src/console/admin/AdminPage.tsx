import { useQuery } from '@tanstack/react-query';
import { api } from '../api/client';
import { useMe } from '../app/session';
import { ErrorAlert } from '../ui/Alert';
import { DataTable } from '../ui/DataTable';
import { formatTime, Page } from '../ui/Page';
import { LoadMore, usePagedList } from '../ui/paging';

const PAGE = 50;

const words = (key: string) => key.replace(/([a-z])([A-Z])/g, '$1 $2').toLowerCase();

/** Super-admins: the whole installation's numbers, workspaces and users. */
export function AdminPage() {
  const me = useMe();
  const enabled = me.superAdmin;
  const stats = useQuery({ queryKey: ['admin', 'stats'], queryFn: () => api('get', '/admin/stats'), enabled, refetchInterval: 15_000 });
  const { query: workspaces, rows: workspaceRows } = usePagedList({
    queryKey: ['admin', 'workspaces'],
    fetchPage: (cursor) => api('get', '/admin/workspaces', { query: { limit: PAGE, cursor } }),
    enabled,
  });
  const { query: users, rows: userRows } = usePagedList({
    queryKey: ['admin', 'users'],
    fetchPage: (cursor) => api('get', '/admin/users', { query: { limit: PAGE, cursor } }),
    enabled,
  });
  if (!enabled) {
    return (
      <Page title="Admin">
        <p>Only super-admins see this page.</p>
      </Page>
    );
  }
  const names = new Map((workspaceRows ?? []).map((w) => [w.id, w.name]));
  return (
    <Page title="Admin">
      <ErrorAlert error={stats.error ?? workspaces.error ?? users.error} />
      {stats.data && (
        <dl className="stats">
          {Object.entries(stats.data).map(([key, value]) => (
            <div key={key}>
              <dt>{words(key)}</dt>
              <dd>
                {typeof value === 'object' && value !== null ? (
                  <span className="stat-breakdown">
                    {Object.entries(value as Record<string, number>).map(([k, v]) => (
                      <span key={k}>
                        {k.toLowerCase()} <strong>{v}</strong>
                      </span>
                    ))}
                  </span>
                ) : (
                  String(value)
                )}
              </dd>
            </div>
          ))}
        </dl>
      )}
      <h2>Workspaces</h2>
      <DataTable
        caption="Workspaces"
        rows={workspaceRows}
        rowKey={(w) => w.id}
        columns={[
          { header: 'Name', cell: (w) => w.name },
          { header: 'Plan', cell: (w) => w.plan.toLowerCase() },
          { header: 'Members', cell: (w) => w.memberCount },
          { header: 'Contacts', cell: (w) => w.contactCount },
          { header: 'Created', cell: (w) => formatTime(w.createdAt) },
        ]}
      />
      <LoadMore query={workspaces} label="Load more workspaces" />
      <h2>Users</h2>
      <DataTable
        caption="Users"
        rows={userRows}
        rowKey={(u) => u.id}
        columns={[
          { header: 'Email', cell: (u) => u.email },
          { header: 'Name', cell: (u) => u.name ?? '—' },
          { header: 'Workspaces', cell: (u) => u.workspaces.map((w) => `${names.get(w.id) ?? `#${w.id}`} (${w.role.toLowerCase()})`).join(', ') || '—' },
          { header: 'Super-admin', cell: (u) => (u.isSuperAdmin ? 'yes' : 'no') },
          { header: 'Created', cell: (u) => formatTime(u.createdAt) },
        ]}
      />
      <LoadMore query={users} label="Load more users" />
    </Page>
  );
}
