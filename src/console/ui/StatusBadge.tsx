const TONES: Record<string, string> = {
  ACTIVE: 'ok',
  COMPLETED: 'ok',
  SENT: 'ok',
  DRAFT: 'muted',
  PAUSED: 'warn',
  QUEUED: 'muted',
  WAITING: 'warn',
  RUNNING: 'info',
  SENDING: 'info',
  FAILED: 'bad',
};

export function StatusBadge({ status }: { status: string }) {
  return <span className={`badge badge-${TONES[status] ?? 'muted'}`}>{status.toLowerCase()}</span>;
}
