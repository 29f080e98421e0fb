import { Type } from '@sinclair/typebox';
import type { App } from '../app.js';

export async function healthRoutes(app: App): Promise<void> {
  app.get(
    '/healthz',
    { config: { access: 'public' }, schema: { response: { 200: Type.Object({ status: Type.Literal('ok') }) } } },
    async () => ({ status: 'ok' as const }),
  );
}
