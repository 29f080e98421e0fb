import type { ReactNode } from 'react';
import { useMe, type Role } from '../app/session';
import { Page } from './Page';

/**
 * A page the caller's role may not use (opened by its address): says which role it needs,
 * instead of a form the API would refuse with 403.
 */
export function NeedsRolePage({ title, needs, doing, children }: { title: string; needs: Role; doing: string; children?: ReactNode }) {
  const me = useMe();
  return (
    <Page title={title}>
      <div className="alert alert-info" role="status">
        {doing} needs the {needs} role; yours in this workspace is {me.role}. Ask an admin of the workspace if you need it.
      </div>
      {children}
    </Page>
  );
}
