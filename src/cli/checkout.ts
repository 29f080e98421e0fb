import type { Command } from 'commander';
import { completeManualCheckout } from '../core/services/billing.js';
import { output, parseId, withSession } from './io.js';

export function registerCheckout(program: Command): void {
  const checkout = program.command('checkout').description('billing checkouts (manual payment provider)');

  checkout
    .command('complete')
    .description("completes a manual checkout: the workspace's plan changes at once")
    .argument('<checkoutId>', 'checkout id (from POST /billing/checkout)')
    .action((id: string, _opts: unknown, cmd: Command) =>
      withSession(cmd, async ({ ctx }) => {
        const done = await completeManualCheckout(ctx, parseId(id, 'checkout id'));
        output(cmd, done, () => `checkout ${id} completed: workspace ${done.workspaceId} is now on ${done.plan}`);
      }),
    );
}
