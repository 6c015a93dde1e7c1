import { afterEach, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import { waitWhileRunning } from './support/wait-for.js';

/**
 * The helper every process test waits with (a demo node's boot, a cluster coming up, pgbouncer's
 * start): a child that dies first must fail the wait at once with what it printed, not after the
 * whole deadline with a bare timeout, or a crash reads as a slow machine.
 */
describe('waitWhileRunning', () => {
  const children: ChildProcess[] = [];

  afterEach(() => {
    for (const child of children.splice(0))
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });

  function run(script: string): { child: ChildProcess; output: () => string } {
    const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let output = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    return { child, output: () => output };
  }

  it('fails at once when the child exits first, with its exit code and its last lines', async () => {
    const { child, output } = run(
      'for (let i = 1; i <= 50; i++) console.log("line " + i); console.error("boom"); process.exit(3)',
    );
    const started = Date.now();
    const error = await waitWhileRunning('the port', child, output, () => false, 30_000).then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(error?.message).toMatch(/^exited with code 3 before the port\n--- its output:\n/);
    // The last 40 lines only: the first ten are cut.
    expect(error?.message).toContain('line 50');
    expect(error?.message).toContain('boom');
    expect(error?.message).not.toContain('line 10\n');
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('names the signal of a child that was killed', async () => {
    const { child, output } = run('setInterval(() => {}, 1000)');
    setTimeout(() => child.kill('SIGKILL'), 200);
    await expect(waitWhileRunning('the port', child, output, () => false, 30_000)).rejects.toThrow(
      /^exited with SIGKILL before the port/,
    );
  });

  it('resolves once the probe holds while the child runs', async () => {
    const { child, output } = run('console.log("ready"); setInterval(() => {}, 1000)');
    await waitWhileRunning('ready', child, output, () => output().includes('ready'), 15_000);
    expect(child.exitCode).toBeNull();
  });

  it('times out with the output of a child that runs but never gets there', async () => {
    const { child, output } = run('console.log("still booting"); setInterval(() => {}, 1000)');
    await waitWhileRunning('its first line', child, output, () => output() !== '', 15_000);
    await expect(waitWhileRunning('the port', child, output, () => false, 500)).rejects.toThrow(
      /^timed out after 500 ms waiting for the port\n--- its output:\nstill booting/,
    );
    expect(child.exitCode).toBeNull();
  });
});
