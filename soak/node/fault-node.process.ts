/**
 * A fault-schedule node as a process of its own (its config in FAULT_NODE, JSON), forked with an
 * IPC channel. The driver ends it with real signals: SIGTERM drains (Nest's shutdown hooks, as a
 * host app's main would), SIGKILL abandons everything. A node whose driver went away (the IPC
 * channel closed) ends itself the hard way, so an interrupted soak leaves no node behind.
 */
import type { DriverMessage, FaultNodeConfig, NodeMessage } from './node-protocol.js';
import { startFaultNode } from './fault-node.js';
import { traceUnhandledClientErrors } from './trace-pg-errors.js';

if (process.env.FAULT_NODE_TRACE === '1') traceUnhandledClientErrors((line) => console.error(line));
const send = (message: NodeMessage) => process.send?.(message);
process.on('disconnect', () => process.kill(process.pid, 'SIGKILL'));

const config = JSON.parse(process.env.FAULT_NODE ?? 'null') as FaultNodeConfig | null;
if (!config) throw new Error('FAULT_NODE is not set');
const app = await startFaultNode(config, {
  send,
  onCommand: (handler) =>
    process.on('message', (message: DriverMessage) => handler(message.id, message.command)),
});
if (!app) process.exit(1);
else app.enableShutdownHooks();
