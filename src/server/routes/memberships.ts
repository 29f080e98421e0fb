import cookie from '@fastify/cookie';
import { Type } from '@sinclair/typebox';
import { startSession } from '../../core/services/auth.js';
import {
  acceptInvitation,
  changeMembershipRole,
  createInvitation,
  inspectInvitation,
  inviteMember,
  listInvitations,
  listMemberships,
  removeMembership,
  revokeInvitation,
} from '../../core/services/memberships.js';
import type { WorkspaceContext } from '../../core/context.js';
import type { InvitationEmail } from '../../core/services/memberships.js';
import { deliverWithRetries } from '../../engine/deliver.js';
import type { App } from '../app.js';
import { IdParams, InvitationAccepted, InvitationAcceptInput, InvitationCreated, ListQuery, Membership, MembershipInput, pageOf, Role } from '../schemas.js';
import { sessionAnswer, setRefreshCookie } from './auth.js';
import type { LoginThrottle } from '../../core/services/auth.js';

/** An invitation as answered by POST /memberships: no token (it went by email). */
const InvitationSent = Type.Object({ id: Type.Integer(), email: Type.String(), role: Role, expiresAt: Type.String() });

/** A pending invitation as listed: no token (only its hash is stored). */
const PendingInvitation = Type.Object({ id: Type.Integer(), email: Type.String(), role: Role, expiresAt: Type.String(), createdAt: Type.String() });

const InvitationToken = Type.Object({ token: Type.String({ minLength: 1, maxLength: 200 }) }, { additionalProperties: false });

const InvitationInspected = Type.Object({
  workspaceName: Type.String(),
  email: Type.String(),
  role: Role,
  expiresAt: Type.String(),
  accountExists: Type.Boolean(),
});

const read = { role: 'VIEWER' as const };
const admin = { role: 'ADMIN' as const };

export async function membershipRoutes(app: App, opts: { publicUrl: string; throttle: LoginThrottle }): Promise<void> {
  // Only the routes that set or read the refresh cookie parse cookies (its hooks would run on every request).
  await app.register(cookie);
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

  /** Sends (and retries) an invitation email after the answer; the token is redacted from the stored copy. */
  function sendInvitationEmail(
    ctx: WorkspaceContext,
    email: InvitationEmail,
    invitationId: number,
    log: { warn: (o: object, m: string) => void; error: (o: object, m: string) => void },
  ): void {
    const tracked = deliverWithRetries(
      ctx,
      { workspaceId: ctx.workspaceId, channel: 'EMAIL', to: email.to, rendered: email.rendered, secrets: email.secrets },
      { signal: closing.signal },
    )
      .then((outcome) => {
        if (outcome.status === 'FAILED') log.warn({ attemptId: outcome.attemptId, error: outcome.error, invitationId }, 'invitation email not delivered');
      })
      .catch((err) => log.error({ err, invitationId }, 'invitation email delivery crashed'))
      .finally(() => inFlight.delete(tracked));
    inFlight.add(tracked);
  }

  // 202: the person becomes a member when they accept the emailed invitation. The answer
  // is the same whether or not the email has an account, and carries no token.
  app.post('/memberships', { config: { access: admin }, schema: { body: MembershipInput, response: { 202: InvitationSent } } }, async (req, reply) => {
    const ctx = req.workspaceCtx();
    const { invitation, email } = await inviteMember(ctx, req.body, { role: req.principal!.role, userId: req.principal!.userId });
    sendInvitationEmail(ctx, email, invitation.id, req.log);
    return reply.code(202).send(invitation);
  });

  app.patch(
    '/memberships/:id',
    {
      config: { access: admin },
      schema: { params: IdParams, body: Type.Object({ role: Role }, { additionalProperties: false }), response: { 200: Membership } },
    },
    async (req) => changeMembershipRole(req.workspaceCtx(), req.params.id, req.body.role, req.principal!.role),
  );

  app.delete('/memberships/:id', { config: { access: admin }, schema: { params: IdParams } }, async (req, reply) => {
    await removeMembership(req.workspaceCtx(), req.params.id, req.principal!.role);
    return reply.code(204).send();
  });

  app.post(
    '/memberships/invitations',
    { config: { access: admin }, schema: { body: MembershipInput, response: { 201: InvitationCreated } } },
    async (req, reply) => {
      const ctx = req.workspaceCtx();
      const { invitation, email } = await createInvitation(ctx, req.body, { role: req.principal!.role, userId: req.principal!.userId });
      sendInvitationEmail(ctx, email, invitation.id, req.log);
      return reply.code(201).send(invitation);
    },
  );

  app.get(
    '/memberships/invitations',
    {
      config: { access: admin },
      schema: { summary: 'List pending invitations (without their tokens)', querystring: ListQuery, response: { 200: pageOf(PendingInvitation) } },
    },
    async (req) => listInvitations(req.workspaceCtx(), req.query),
  );

  app.delete(
    '/memberships/invitations/:id',
    { config: { access: admin }, schema: { summary: 'Withdraw a pending invitation', params: IdParams } },
    async (req, reply) => {
      await revokeInvitation(req.workspaceCtx(), req.params.id);
      return reply.code(204).send();
    },
  );

  // What the accept page shows before the invitee acts; the token is the credential.
  app.post(
    '/invitations/inspect',
    {
      config: { access: 'public' },
      schema: { summary: 'Read an invitation by its token before accepting it', body: InvitationToken, response: { 200: InvitationInspected } },
    },
    async (req) => inspectInvitation(req.systemCtx(), req.body.token),
  );

  // The invitee is signed in, like a login (token in the body, refresh cookie): a new account
  // with the password it chose, an existing one with its own (acceptInvitation checks it).
  app.post(
    '/invitations/accept',
    { config: { access: 'public' }, schema: { body: InvitationAcceptInput, response: { 200: InvitationAccepted } } },
    async (req, reply) => {
      const ctx = req.systemCtx();
      const accepted = await acceptInvitation(ctx, opts.throttle, req.body);
      const session = await startSession(ctx, accepted.user.id, accepted.workspace.id);
      setRefreshCookie(reply, opts.publicUrl, session.refreshToken, session.refreshMaxAge);
      return { ...accepted, ...sessionAnswer(session), signedIn: true };
    },
  );
}
