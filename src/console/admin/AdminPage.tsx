import { useQuery } from '@tanstack/react-query';
import { api } from '../api/client';
import { useMe } from '../app/session';
import { ErrorAlert } from '../ui/Alert';
import { formatTime, Page } from '../ui/Page';

const words = (key: string) => key.replace(/([a-z])([A-Z])/g, '$1 $2').toLowerCase();

/** Super-admins: the whole installation's numbers, workspaces and users. */
export function AdminPage() {
  const me = useMe();
  const enabled = me.superAdmin;
  const stats = useQuery({ queryKey: ['admin', 'stats'], queryFn: () => api('get', '/admin/stats'), enabled, refetchInterval: 15_000 });
  const workspaces = useQuery({ queryKey: ['admin', 'workspaces'], queryFn: () => api('get', '/admin/workspaces', { query: { limit: 200 } }), enabled });
  const users = useQuery({ queryKey: ['admin', 'users'], queryFn: () => api('get', '/admin/users', { query: { limit: 200 } }), enabled });
  if (!enabled) {
    return (
      <Page title="Admin">
        <p>Only super-admins see this page.</p>
      </Page>
    );
  }
  const names = new Map((workspaces.data?.data ?? []).map((w) => [w.id, w.name]));
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
      {workspaces.data && (
        <table className="table">
          <caption className="visually-hidden">Workspaces</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Plan</th>
              <th scope="col">Members</th>
              <th scope="col">Contacts</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {workspaces.data.data.map((w) => (
              <tr key={w.id}>
                <td>{w.name}</td>
                <td>{w.plan.toLowerCase()}</td>
                <td>{w.memberCount}</td>
                <td>{w.contactCount}</td>
                <td>{formatTime(w.createdAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <h2>Users</h2>
      {users.data && (
        <table className="table">
          <caption className="visually-hidden">Users</caption>
          <thead>
            <tr>
              <th scope="col">Email</th>
              <th scope="col">Name</th>
              <th scope="col">Workspaces</th>
              <th scope="col">Super-admin</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {users.data.data.map((u) => (
              <tr key={u.id}>
                <td>{u.email}</td>
                <td>{u.name ?? '—'}</td>
                <td>{u.workspaces.map((w) => `${names.get(w.id) ?? `#${w.id}`} (${w.role.toLowerCase()})`).join(', ') || '—'}</td>
                <td>{u.isSuperAdmin ? 'yes' : 'no'}</td>
                <td>{formatTime(u.createdAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Page>
  );
}
