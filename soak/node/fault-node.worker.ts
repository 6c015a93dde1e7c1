/**
 * A fault-schedule node in a worker thread (its config in `workerData`). The driver "kills" it
 * with `worker.terminate()` (no shutdown hook runs, its timers and work in flight are dropped)
 * and ends its connections server-side; a `drain` command is its SIGTERM: the app closes, then
 * the thread ends.
 */
import { parentPort, workerData } from 'node:worker_threads';
import type { DriverMessage, FaultNodeConfig, NodeMessage } from './node-protocol.js';
import { startFaultNode } from './fault-node.js';
import { traceUnhandledClientErrors } from './trace-pg-errors.js';

const port = parentPort;
if (!port) throw new Error('fault-node.worker runs in a worker thread');
if (process.env.FAULT_NODE_TRACE === '1') traceUnhandledClientErrors((line) => console.error(line));

const app = await startFaultNode(workerData as FaultNodeConfig, {
  send: (message: NodeMessage) => port.postMessage(message),
  onCommand: (handler) =>
    port.on('message', (message: DriverMessage) => handler(message.id, message.command)),
});
if (!app) process.exit(1);
