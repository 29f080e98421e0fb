// The entry of the single executable (build-exe.mjs bundles it as CommonJS, the main script
// of a Node single executable application). It does what bin/svc does for the npm install.
//
// `svc serve` runs with 4 MB semi-spaces (16 MB with SVC_ENGINE=false; `svc contacts import`
// and `export` with 16 MB) and one malloc arena whose large blocks are mapped apart (see bin/svc). Inside the executable, arguments
// are all the program's, never Node options, but Node still reads NODE_OPTIONS: the process
// re-executes itself in place (same pid, same standard streams) with the flag added there.
// Short builtin calls are off for every command: build-exe.mjs puts the V8 flag in the
// executable's own execArgv (NODE_OPTIONS may not carry it).
// The program itself is imported only after that, so the first image loads nothing.
const SEMI_SPACE = '--max-semi-space-size';
const nodeOptions = process.env.NODE_OPTIONS ?? '';
const args = process.argv.slice(2);
// `svc contacts import` and `export` too, with 16 MB semi-spaces, as bin/svc gives them.
const contactsAt = args.indexOf('contacts');
const bulk = contactsAt !== -1 && ['import', 'export'].includes(args[contactsAt + 1] ?? '');
if (
  (args.includes('serve') || bulk) &&
  typeof process.execve === 'function' &&
  !process.env.SVC_NO_REEXEC &&
  !process.execArgv.some((a) => a.startsWith(SEMI_SPACE)) &&
  !nodeOptions.includes(SEMI_SPACE)
) {
  // process.argv is [executable, argv0, ...arguments] in a single executable.
  // And one malloc arena, large blocks mapped apart, as bin/svc sets.
  process.execve(process.execPath, process.argv.slice(1), {
    MALLOC_ARENA_MAX: '1',
    MALLOC_MMAP_THRESHOLD_: '32768',
    ...process.env,
    // 16 MB on an ingest-only node, as bin/svc gives it.
    NODE_OPTIONS:
      `${nodeOptions} ${SEMI_SPACE}=${bulk || ['0', 'false', 'no', 'off'].includes((process.env.SVC_ENGINE ?? '').trim().toLowerCase()) ? 16 : 4}`.trim(),
  });
}

void import('./main.js').then(({ main }) => main(process.argv));
