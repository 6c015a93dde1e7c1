import { readFileSync } from 'node:fs';

/** The package version, read from the package.json one level above `src/` and `dist/`. */
export const CYCLIUM_VERSION: string = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
    version: string;
  }
).version;
