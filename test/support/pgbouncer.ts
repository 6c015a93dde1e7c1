import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { delimiter, join } from 'node:path';
import { freePort } from './free-port.js';
import { waitWhileRunning } from './wait-for.js';

/** Debian puts the binary in /usr/sbin, which a non-root PATH often lacks. */
const PLACES = [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/usr/local/sbin'];

/** PgBouncer's binary and version, or why it cannot run here (the caller skips with that notice). */
export interface PgBouncerBinary {
  binary: string;
  version: [major: number, minor: number];
}

/** 1.21 added prepared statements in transaction mode, when `max_prepared_statements` allows them. */
export function carriesPreparedStatements({ version: [major, minor] }: PgBouncerBinary): boolean {
  return major > 1 || minor >= 21;
}

export function findPgBouncer(): PgBouncerBinary | { missing: string } {
  const binary = PLACES.filter(Boolean)
    .map((dir) => join(dir, 'pgbouncer'))
    .find((path) => {
      try {
        accessSync(path, constants.X_OK);
        return true;
      } catch {
        return false;
      }
    });
  if (!binary)
    return {
      missing: 'pgbouncer is not installed (Debian: apt-get install pgbouncer; .ci/run does it)',
    };
  if (userInfo().uid === 0 && !userExists('postgres'))
    return { missing: 'running as root without a postgres user for pgbouncer -u' };
  const banner = execFileSync(binary, ['--version'], { encoding: 'utf8' });
  const match = /PgBouncer (\d+)\.(\d+)/.exec(banner);
  if (!match) return { missing: `cannot read the version of ${binary}: ${banner.split('\n')[0]}` };
  return { binary, version: [Number(match[1]), Number(match[2])] };
}

function userExists(name: string): boolean {
  try {
    execFileSync('id', [name], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

export interface RunningPgBouncer {
  /** `serverUrl` with its port replaced by the pooler's. */
  url: string;
  /** What PgBouncer logged, for a failing test's message. */
  log(): string;
  stop(): Promise<void>;
}

/**
 * A PgBouncer of the test's own in transaction mode, in front of `serverUrl`'s server (the
 * embedded one: user postgres, password postgres), on a free loopback port with its files in a
 * temporary folder. PgBouncer refuses to run as root, so there it drops to the postgres user.
 */
export async function startPgBouncer(
  pgbouncer: PgBouncerBinary,
  serverUrl: string,
): Promise<RunningPgBouncer> {
  const server = new URL(serverUrl);
  const user = decodeURIComponent(server.username);
  const password = decodeURIComponent(server.password);
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'cyclium-pgbouncer-'));
  const ini = join(dir, 'pgbouncer.ini');
  await writeFile(join(dir, 'userlist.txt'), `"${user}" "${password}"\n`);
  await writeFile(
    ini,
    [
      '[databases]',
      // Any database name the client asks for, on the real server, logged in with the test's password.
      `* = host=${server.hostname} port=${server.port} user=${user} password=${password}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${join(dir, 'userlist.txt')}`,
      'pool_mode = transaction',
      'default_pool_size = 20',
      ...(carriesPreparedStatements(pgbouncer) ? ['max_prepared_statements = 200'] : []),
      'max_client_conn = 200',
      // pg may send these as startup parameters; PgBouncer refuses a connection with one it does not know.
      'ignore_startup_parameters = extra_float_digits,options,statement_timeout,lock_timeout,idle_in_transaction_session_timeout',
      '',
    ].join('\n'),
  );
  // The postgres user PgBouncer drops to must read its files.
  await chmod(dir, 0o755);
  const args = userInfo().uid === 0 ? [ini, '-u', 'postgres'] : [ini];
  const child: ChildProcess = spawn(pgbouncer.binary, args, {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  child.stderr?.on('data', (chunk: Buffer) => (log += chunk.toString()));
  const exited = new Promise<void>((done) => child.once('exit', () => done()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 3_000);
      await exited;
      clearTimeout(timer);
    }
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await waitWhileRunning(
      'pgbouncer to accept connections',
      child,
      () => log,
      () => accepts(port),
      10_000,
      50,
    );
  } catch (error) {
    await stop();
    throw error;
  }
  const url = new URL(serverUrl);
  url.port = String(port);
  return { url: url.toString(), log: () => log, stop };
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
