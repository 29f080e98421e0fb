import { defineConfig } from 'drizzle-kit';

// The PostgreSQL store's schema and migrations, beside SQLite's (drizzle.config.ts).
export default defineConfig({
  dialect: 'postgresql',
  schema: './src/core/db/schema.pg.ts',
  out: './migrations/pg',
});
