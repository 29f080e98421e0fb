import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useEffect, useRef, useState } from 'react';
import { api, describeError, type ResultOf } from '../api/client';
import { useCan } from '../app/session';
import { Alert, ErrorAlert } from '../ui/Alert';
import { DataTable } from '../ui/DataTable';

type Plan = ResultOf<'/billing/plan', 'get'>['plan'];
type PaidPlan = Exclude<Plan, 'STARTER'>;
type Checkout = ResultOf<'/billing/checkout', 'post'>;

const PLANS: Plan[] = ['STARTER', 'GROWTH', 'PRO'];
const PLAN_NAME: Record<Plan, string> = { STARTER: 'Starter', GROWTH: 'Growth', PRO: 'Pro' };
const roleName = (r: string) => r[0] + r.slice(1).toLowerCase();

/** What each plan includes (SPEC.md section 8: the audit feed and API key roles from Growth). */
const PLAN_FEATURES: Record<Plan, { auditLog: boolean; keyRoles: string }> = {
  STARTER: { auditLog: false, keyRoles: 'Viewer' },
  GROWTH: { auditLog: true, keyRoles: 'Viewer, Member, Admin' },
  PRO: { auditLog: true, keyRoles: 'Viewer, Member, Admin' },
};

const USAGE: { key: keyof ResultOf<'/billing/plan', 'get'>['usage']; label: string }[] = [
  { key: 'contacts', label: 'Contacts' },
  { key: 'workflows', label: 'Workflows' },
  { key: 'templates', label: 'Templates' },
  { key: 'apiKeys', label: 'Active API keys' },
  { key: 'members', label: 'Members' },
  { key: 'runsThisMonth', label: 'Runs this month' },
];

/**
 * Billing: the plan, its features and the workspace's usage (every role); a checkout to change
 * plan for the OWNER. A Stripe checkout answers with a payment page the browser goes to; a manual
 * one waits for the server's operator, and the page follows the plan until it changes.
 */
export function BillingSection() {
  const canCheckout = useCan('OWNER');
  const queries = useQueryClient();
  const [pending, setPending] = useState<Checkout | null>(null);
  const [changed, setChanged] = useState<Plan | null>(null);
  // Stripe sends the payer back here with ?checkout=N (and &cancelled=1 when they gave up).
  const [returned] = useState(() => {
    const params = new URLSearchParams(window.location.search);
    const id = params.get('checkout');
    return id && /^\d+$/.test(id) ? { checkoutId: id, cancelled: params.get('cancelled') === '1' } : null;
  });
  // The plan first seen after coming back: the old one, until the webhook has changed it.
  const planOnReturn = useRef<Plan | null>(null);
  const [confirming, setConfirming] = useState(returned !== null && !returned.cancelled);
  const plan = useQuery({
    queryKey: ['billing-plan'],
    queryFn: () => api('get', '/billing/plan'),
    // While a checkout waits for the operator or for Stripe's webhook, look for the new plan now and then.
    refetchInterval: pending || confirming ? 3000 : false,
  });
  const current = plan.data?.plan;
  // Back from Stripe: the plan first seen is the old one, until the signed webhook changes it
  // (given up after two minutes: the page says so and the plan shows whatever it is).
  useEffect(() => {
    if (!confirming || !current) return;
    if (planOnReturn.current === null) planOnReturn.current = current;
    else if (current !== planOnReturn.current) {
      setConfirming(false);
      setChanged(current);
    }
  }, [confirming, current]);
  useEffect(() => {
    if (!confirming) return;
    const timer = setTimeout(() => setConfirming(false), 120_000);
    return () => clearTimeout(timer);
  }, [confirming]);

  useEffect(() => {
    if (pending && current === pending.plan) {
      setPending(null);
      setChanged(current);
      void queries.invalidateQueries({ queryKey: ['audit-logs'] });
    }
  }, [pending, current, queries]);

  const checkout = useMutation({
    mutationFn: (target: PaidPlan) => api('post', '/billing/checkout', { body: { plan: target } }),
    onSuccess: (c) => {
      if (c.url) {
        // Stripe: pay on its page; its webhook completes the checkout.
        window.location.assign(c.url);
        return;
      }
      if (c.status === 'COMPLETED') {
        setChanged(c.plan);
        void queries.invalidateQueries({ queryKey: ['billing-plan'] });
        return;
      }
      setPending(c);
    },
  });
  const start = (target: PaidPlan) => {
    setChanged(null);
    setPending(null);
    checkout.mutate(target);
  };

  return (
    <section aria-labelledby="billing-heading">
      <h2 id="billing-heading">Billing</h2>
      <ErrorAlert error={plan.error} />
      {plan.isPending && <p className="loading">Loading the plan…</p>}
      {changed && <Alert kind="success">The workspace is now on the {PLAN_NAME[changed]} plan.</Alert>}
      {pending && (
        <Alert kind="info">
          Checkout {pending.checkoutId} for the {PLAN_NAME[pending.plan]} plan is waiting for this server’s operator, who completes it with{' '}
          <code>svc checkout complete {pending.checkoutId}</code>. This page shows the new plan once that is done.
        </Alert>
      )}
      {returned?.cancelled && !changed && <Alert kind="info">Checkout {returned.checkoutId} was cancelled: the plan has not changed.</Alert>}
      {confirming && (
        <Alert kind="info">Thank you. Stripe is confirming checkout {returned?.checkoutId}: this page shows the new plan as soon as it has.</Alert>
      )}
      {checkout.isSuccess && checkout.data.url && <Alert kind="info">Opening the payment page…</Alert>}
      {checkout.error ? <Alert>{describeError(checkout.error)}</Alert> : null}
      {plan.data && (
        <>
          <div className="card billing-current">
            <h3>Current plan</h3>
            <p className="plan-name">{PLAN_NAME[plan.data.plan]}</p>
            <dl className="facts">
              <dt>Audit log</dt>
              <dd>{plan.data.features.auditLog ? 'Included' : 'Not included (Growth and Pro)'}</dd>
              <dt>API key roles</dt>
              <dd>{plan.data.features.apiKeyRoles.map(roleName).join(', ')}</dd>
            </dl>
          </div>
          <h3>Usage</h3>
          <dl className="stats usage">
            {USAGE.map((u) => (
              <div key={u.key}>
                <dt>{u.label}</dt>
                <dd>{plan.data.usage[u.key].toLocaleString('en-US')}</dd>
              </div>
            ))}
          </dl>
          <h3>Plans</h3>
          <DataTable
            caption="Plans"
            className="plans"
            rows={PLANS}
            rowKey={(p) => p}
            rowClassName={(p) => (p === plan.data.plan ? 'current' : undefined)}
            columns={[
              {
                header: 'Plan',
                scope: 'row',
                cell: (p) => (
                  <>
                    {PLAN_NAME[p]} {p === plan.data.plan && <span className="badge badge-ok">current</span>}
                  </>
                ),
              },
              { header: 'Audit log', cell: (p) => (PLAN_FEATURES[p].auditLog ? 'Yes' : 'No') },
              { header: 'API key roles', cell: (p) => PLAN_FEATURES[p].keyRoles },
            ]}
            actions={
              canCheckout && ((p) => <PlanAction plan={p} current={plan.data.plan} disabled={checkout.isPending || pending !== null} onChoose={start} />)
            }
          />
          {!canCheckout && <p className="hint">Only an owner of the workspace can change its plan.</p>}
        </>
      )}
    </section>
  );
}

/** A plan's row action: upgrade or change to it (STARTER is set by the server's operator). */
function PlanAction({ plan: p, current, disabled, onChoose }: { plan: Plan; current: Plan; disabled: boolean; onChoose: (p: PaidPlan) => void }) {
  if (p === current) return null;
  if (p === 'STARTER') return <span className="hint">Ask the server’s operator</span>;
  const higher = PLANS.indexOf(p) > PLANS.indexOf(current);
  return (
    <button type="button" className={higher ? 'button-primary' : 'button-secondary'} disabled={disabled} onClick={() => onChoose(p)}>
      {higher ? `Upgrade to ${PLAN_NAME[p]}` : `Change to ${PLAN_NAME[p]}`}
    </button>
  );
}
