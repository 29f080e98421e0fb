import type { ResultOf } from '../api/client';

export type Workflow = ResultOf<'/workflows/{id}', 'get'>;

/** What each editable section of a workflow's page gets. */
export interface WorkflowSectionProps {
  workflow: Workflow;
  canWrite: boolean;
  onSaved: (w: Workflow) => void;
  /** A refused activation: its pointers are shown at the section's fields. */
  activationError: unknown;
}
