import { createHash, randomBytes, randomInt, scrypt as scryptCb, timingSafeEqual, type ScryptOptions } from 'node:crypto';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** Uniform base62 string from a CSPRNG (randomInt rejects biased draws). */
export function randomBase62(length: number): string {
  let out = '';
  for (let i = 0; i < length; i++) out += BASE62[randomInt(62)];
  return out;
}

export function isBase62(s: string): boolean {
  return /^[0-9A-Za-z]*$/.test(s);
}

export function sha256Hex(input: string | Buffer): string {
  return createHash('sha256').update(input).digest('hex');
}

export function randomToken(bytes = 32): string {
  return randomBytes(bytes).toString('base64url');
}

/** Constant-time string comparison; unequal lengths compare a same-length dummy first. */
export function safeEqual(a: string, b: string): boolean {
  const ab = Buffer.from(a);
  const bb = Buffer.from(b);
  if (ab.length !== bb.length) {
    timingSafeEqual(ab, ab);
    return false;
  }
  return timingSafeEqual(ab, bb);
}

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

export function crc32(s: string): number {
  let c = 0xffffffff;
  for (const byte of Buffer.from(s)) c = CRC_TABLE[(c ^ byte) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** A fixed-width base62 rendering of a 32-bit number (6 digits cover 2^32). */
export function base62Fixed(n: number, width = 6): string {
  let out = '';
  let v = n;
  for (let i = 0; i < width; i++) {
    out = BASE62[v % 62] + out;
    v = Math.floor(v / 62);
  }
  return out;
}

// scrypt at N=2^15, r=8 costs 32 MiB and tens of milliseconds per guess.
export const PASSWORD_HASH_COST = 32768;
const SCRYPT = { N: PASSWORD_HASH_COST, r: 8, p: 1, keylen: 32, maxmem: 64 * 1024 * 1024 };

/**
 * The scrypt cost (N) of the password hashes this process makes from now on. The product
 * never calls it: the test suite's in-process servers hash at a lower cost (a few hundred
 * thousand logins would otherwise spend minutes of CPU in scrypt), while `svc` itself, and
 * so the CLI tests, hash at PASSWORD_HASH_COST. Verifying reads the cost from the hash.
 */
export function setPasswordHashCost(n: number): void {
  if (!Number.isInteger(Math.log2(n)) || n < 1024) throw new Error('the scrypt cost must be a power of two, at least 1024');
  SCRYPT.N = n;
  dummyHash = undefined;
}

function scrypt(password: string, salt: Buffer, keylen: number, opts: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => scryptCb(password, salt, keylen, opts, (err, key) => (err ? reject(err) : resolve(key))));
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scrypt(password, salt, SCRYPT.keylen, SCRYPT);
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString('base64url')}$${key.toString('base64url')}`;
}

// Verifying against this keeps an unknown email as slow as a wrong password.
let dummyHash: Promise<string> | undefined;

function dummy(): Promise<string> {
  dummyHash ??= hashPassword(randomToken());
  return dummyHash;
}

export async function verifyPassword(password: string, stored: string | null | undefined): Promise<boolean> {
  const encoded = stored ?? (await dummy());
  const [scheme, n, r, p, saltB64, keyB64] = encoded.split('$');
  if (scheme !== 'scrypt' || !saltB64 || !keyB64) return false;
  const expected = Buffer.from(keyB64, 'base64url');
  const opts = { N: Number(n), r: Number(r), p: Number(p), maxmem: SCRYPT.maxmem };
  const key = await scrypt(password, Buffer.from(saltB64, 'base64url'), expected.length, opts);
  return timingSafeEqual(key, expected) && stored != null;
}

export function generatePassword(): string {
  return randomBase62(20);
}
