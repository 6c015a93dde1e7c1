import { chmod, stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';

/**
 * PostgreSQL refuses to run as root, so as root it runs as the `postgres` user, which must be able
 * to walk down to its binaries and its data directory. A checkout inside a 0700 folder (what
 * `mktemp -d` makes) blocks that with EACCES on initdb; granting others `x` on each folder above
 * fixes it without granting read or write.
 */
export async function grantTraversal(path: string): Promise<void> {
  if (process.getuid?.() !== 0) return;
  for (let dir = dirname(resolve(path)); ; dir = dirname(dir)) {
    const { mode } = await stat(dir);
    if ((mode & 0o001) === 0) await chmod(dir, mode | 0o001);
    if (dirname(dir) === dir) return;
  }
}
