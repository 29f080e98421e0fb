import { Type } from '@sinclair/typebox';
import {
  acceptInvitation,
  addMembership,
  changeMembershipRole,
  createInvitation,
  listMemberships,
  removeMembership,
} from '../../core/services/memberships.js';
import { deliverWithRetries } from '../../engine/deliver.js';
import type { App } from '../app.js';
import { IdParams, InvitationAccepted, InvitationAcceptInput, InvitationCreated, ListQuery, Membership, MembershipInput, pageOf, Role } from '../schemas.js';

const read = { role: 'VIEWER' as const };
const admin = { role: 'ADMIN' as const };

export async function membershipRoutes(app: App): Promise<void> {
  // Invitation emails are sent (and retried) after the 201; closing the server stops the
  // waiting between tries and lets tries in flight finish.
  const closing = new AbortController();
  const inFlight = new Set<Promise<unknown>>();
  app.addHook('onClose', async () => {
    closing.abort();
    await Promise.allSettled(inFlight);
  });

  app.get('/memberships', { config: { access: read }, schema: { querystring: ListQuery, response: { 200: pageOf(Membership) } } }, async (req) =>
    listMemberships(req.workspaceCtx(), req.query),
  );

  app.post('/memberships', { config: { access: admin }, schema: { body: MembershipInput, response: { 201: Membership } } }, async (req, reply) =>
    reply.code(201).send(addMembership(req.workspaceCtx(), req.body, req.principal!.role)),
  );

  app.patch(
    '/memberships/:id',
    { config: { access: admin }, schema: { params: IdParams, body: Type.Object({ role: Role }, { additionalProperties: false }), response: { 200: Membership } } },
    async (req) => changeMembershipRole(req.workspaceCtx(), req.params.id, req.body.role, req.principal!.role),
  );

  app.delete('/memberships/:id', { config: { access: admin }, schema: { params: IdParams } }, async (req, reply) => {
    removeMembership(req.workspaceCtx(), req.params.id, req.principal!.role);
    return reply.code(204).send();
  });

  app.post(
    '/memberships/invitations',
    { config: { access: admin }, schema: { body: MembershipInput, response: { 201: InvitationCreated } } },
    async (req, reply) => {
      const ctx = req.workspaceCtx();
      const { invitation, email } = createInvitation(ctx, req.body, { role: req.principal!.role, userId: req.principal!.userId });
      const tracked = deliverWithRetries({ db: ctx.db, config: ctx.config }, { workspaceId: ctx.workspaceId, channel: 'EMAIL', to: email.to, rendered: email.rendered }, { signal: closing.signal })
        .then((outcome) => {
          if (outcome.status === 'FAILED') req.log.warn({ attemptId: outcome.attemptId, error: outcome.error, invitationId: invitation.id }, 'invitation email not delivered');
        })
        .catch((err) => req.log.error({ err, invitationId: invitation.id }, 'invitation email delivery crashed'))
        .finally(() => inFlight.delete(tracked));
      inFlight.add(tracked);
      return reply.code(201).send(invitation);
    },
  );

  app.post(
    '/invitations/accept',
    { config: { access: 'public' }, schema: { body: InvitationAcceptInput, response: { 200: InvitationAccepted } } },
    async (req) => acceptInvitation(req.systemCtx(), req.body),
  );
}
