import { PLANS, ROLES, type Plan, type Role } from './db/schema.js';

export function roleAtLeast(role: Role, min: Role): boolean {
  return ROLES.indexOf(role) >= ROLES.indexOf(min);
}

/**
 * Whether a role reads secrets masked: a VIEWER may read workflows, automations and what a
 * sandbox recorded, but not the webhook URLs and the keys in them (MEMBER and above, who may
 * edit them, see them whole).
 */
export function readsMasked(role: Role): boolean {
  return !roleAtLeast(role, 'MEMBER');
}

export function planAtLeast(plan: Plan, min: Plan): boolean {
  return PLANS.indexOf(plan) >= PLANS.indexOf(min);
}

/** The lowest plan on which an API key of this role may exist (SPEC.md section 5). */
export function minimumPlanForKeyRole(role: Role): Plan {
  return role === 'VIEWER' ? 'STARTER' : 'GROWTH';
}

export function parseRole(value: string): Role | undefined {
  const upper = value.trim().toUpperCase();
  return (ROLES as readonly string[]).includes(upper) ? (upper as Role) : undefined;
}

export function parsePlan(value: string): Plan | undefined {
  const upper = value.trim().toUpperCase();
  return (PLANS as readonly string[]).includes(upper) ? (upper as Plan) : undefined;
}
