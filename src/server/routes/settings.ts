import { getChannels, updateChannels, type ChannelsInput } from '../../core/services/channels.js';
import type { App } from '../app.js';
import { ChannelSettings, ChannelSettingsInput } from '../schemas.js';

const admin = { role: 'ADMIN' as const };

export async function settingsRoutes(app: App): Promise<void> {
  app.get('/settings/channels', { config: { access: admin }, schema: { response: { 200: ChannelSettings } } }, async (req) => getChannels(req.workspaceCtx()));

  app.put('/settings/channels', { config: { access: admin }, schema: { body: ChannelSettingsInput, response: { 200: ChannelSettings } } }, async (req) =>
    updateChannels(req.workspaceCtx(), req.body as ChannelsInput),
  );
}
