// Set by build.mjs from package.json; running from source (tsx), it is "dev".
declare const SVC_VERSION: string | undefined;

/** The version of svc that is running. */
export const VERSION: string = typeof SVC_VERSION === 'string' ? SVC_VERSION : 'dev';
