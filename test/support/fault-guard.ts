/**
 * Loaded before every integration test file (jest.config.js): a test fails when, during it, this
 * process saw an unhandled rejection or an uncaught exception (an 'error' event nobody listened
 * to ends up as one), or a node process it started died on its own or printed a crash. The
 * library promises that a database going away never kills a process; this is where that shows.
 */
import { afterAll, afterEach } from '@jest/globals';
import { takeNodeFaults } from './demo-node.js';

const faults: string[] = [];
const describe = (error: unknown) =>
  error instanceof Error ? (error.stack ?? error.message) : String(error);
const onRejection = (reason: unknown) =>
  void faults.push(`unhandled rejection: ${describe(reason)}`);
const onException = (error: unknown) => void faults.push(`uncaught exception: ${describe(error)}`);
process.on('unhandledRejection', onRejection);
process.on('uncaughtException', onException);

afterEach(() => {
  const found = [...faults.splice(0), ...takeNodeFaults()];
  if (found.length > 0)
    throw new Error(
      `fault guard: ${found.length} fault(s) during this test:\n${found.join('\n\n')}`,
    );
});

afterAll(() => {
  process.removeListener('unhandledRejection', onRejection);
  process.removeListener('uncaughtException', onException);
});
