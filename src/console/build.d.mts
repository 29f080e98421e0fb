export declare const LOGIN_JS_BUDGET: number;
export declare function buildConsole(opts?: {
  outdir?: string;
  clean?: boolean;
  quiet?: boolean;
}): Promise<{ loginJsGzip: number; cssGzip: number; files: string[] }>;
