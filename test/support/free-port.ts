// The port helper alone. Through the testing barrel it would load Nest, TypeORM and the whole
// library into the module registry of every file that imports it, and Jest gives each test file a
// registry of its own: the fault guard (loaded before every integration file) reaches this through
// demo-node.ts, so that cost about 0.6 s of CPU per file, most of which start no library in-process.
export { freePort } from '../../libs/cyclium/src/testing/embedded-postgres.js';
