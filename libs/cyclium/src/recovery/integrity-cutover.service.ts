import {
  Inject,
  Injectable,
  Logger,
  type BeforeApplicationShutdown,
  type OnModuleInit,
} from '@nestjs/common';
import { NodeSignatures, type SignedPeer } from '../cluster/node-signatures.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { TriggerRequests } from '../dispatch/trigger-requests.service.js';
import { EpisodeJournal } from '../episodes/episode-journal.js';
import type { CutoverScope } from '../integrity/unsigned-pages.js';
import { EpisodeStore } from '../episodes/episode-store.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { RowSigner } from '../integrity/row-signer.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { sameEnv, sameStack, stackCovers } from '../scope/scope-predicates.js';
import { OutageLog } from '../sql/database-errors.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { WorkflowInstanceStore } from '../workflows/workflow-instance-store.js';

/**
 * What one look found: the cut-over recorded before, the window still open (and why), or recorded
 * now.
 */
type Recorded = { kind: 'recorded' };
type Open = { kind: 'open'; unsigned: string[] };
type Sealed = { kind: 'sealed'; signed: Record<string, number> };
type Look = Recorded | Open | Sealed;

/**
 * Turning the `integrity` option on in a live system. Rows written by nodes without it carry no
 * signature; refusing them all would fail every episode in flight as `tampered`. So the nodes of
 * a stack and env with the option accept a row with no signature at all (never one that does not
 * verify) until their cut-over is recorded in `cyclium_integrity_cutovers`, and sign what they
 * write meanwhile. The cut-over is recorded, on the database clock, by the first node with the
 * option that finds no live node of its scope without it (a rolling switch has ended): in the same
 * transaction it signs every unsigned row still in flight there (episodes, their checkpoints,
 * waiting trigger requests, live workflow instances), locked until it commits. From then on every
 * node of the scope refuses unsigned rows. A node checks at boot, before anything runs, and while
 * the window is open once a node beat; once recorded it asks no more.
 */
@Injectable()
export class IntegrityCutover implements OnModuleInit, BeforeApplicationShutdown {
  private readonly logger = new Logger('CycliumIntegrity');
  private readonly outage = new OutageLog(this.logger, 'integrity cut-over check');
  private readonly nodes: NodeSignatures;
  private timer: NodeJS.Timeout | undefined;
  private checking: Promise<void> | undefined;
  private reported = '';

  constructor(
    private readonly database: CycliumDataSource,
    private readonly signer: RowSigner,
    private readonly identity: NodeIdentity,
    private readonly episodes: EpisodeStore,
    private readonly journal: EpisodeJournal,
    private readonly requests: TriggerRequests,
    private readonly instances: WorkflowInstanceStore,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {
    this.nodes = new NodeSignatures(signer, this.logger);
  }

  async onModuleInit(): Promise<void> {
    if (!this.signer.enabled) return;
    await this.database.atBoot('checking the integrity cut-over', () => this.check());
    if (!this.signer.acceptsUnsigned) return;
    this.timer = setInterval(() => {
      this.checking ??= this.check()
        .then(() => this.outage.succeeded())
        .catch((error: unknown) => this.outage.failed(error))
        .finally(() => (this.checking = undefined));
    }, this.options.nodeBeatIntervalMs);
    this.timer.unref();
  }

  async beforeApplicationShutdown(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.checking;
  }

  private get scope(): CutoverScope {
    return { stack: this.options.stackSlug, env: this.options.env };
  }

  /** One look at the cut-over (see the class); sets what RowSigner accepts. */
  private async check(): Promise<void> {
    const look = await this.database.transaction((client) => this.look(client));
    this.signer.acceptUnsigned(look.kind === 'open');
    const where = `stack ${this.scope.stack ?? '(none)'}, env ${this.scope.env ?? '(default)'}`;
    if (look.kind === 'open') {
      const nodes = look.unsigned.join(', ');
      if (nodes !== this.reported) {
        this.logger.warn(
          `integrity (${where}): rows without a signature are accepted while nodes without the ` +
            `option are live ` +
            `(${nodes}); the cut-over is recorded once they are gone`,
        );
      }
      this.reported = nodes;
      return;
    }
    clearInterval(this.timer);
    this.timer = undefined;
    if (look.kind === 'sealed') {
      const counts = Object.entries(look.signed).map(([table, n]) => `${n} ${table}`);
      this.logger.log(
        `integrity (${where}): cut-over recorded, no live node without the option; signed the ` +
          `unsigned rows ` +
          `in flight (${counts.join(', ')}); from now on unsigned rows are refused`,
      );
    } else if (this.reported !== '') {
      this.logger.log(
        `integrity (${where}): cut-over recorded by another node; from now on unsigned rows are ` +
          `refused`,
      );
    }
  }

  private async look(client: SqlExecutor): Promise<Look> {
    const { stack, env } = this.scope;
    const recorded = await client.query(
      `SELECT 1 FROM cyclium_integrity_cutovers
        WHERE ${sameStack('source_stack', '$1::text')} AND ${sameEnv('source_env', '$2::text')}`,
      [stack, env],
    );
    if (recorded.rows.length > 0) return { kind: 'recorded' };
    // Nodes whose rows this node acts on, seen within three of its beats, other than itself.
    const { rows } = await client.query<SignedPeer>(
      `SELECT node_identity AS identity, stack, env, mode, actors, signature FROM cyclium_nodes n
        WHERE ${sameEnv('n.env', '$2::text')} AND ${stackCovers('n.stack', '$1::text')}
          AND n.node_identity <> $3
          AND n.last_seen_at > now() - make_interval(secs => $4::double precision)
        ORDER BY n.node_identity`,
      [stack, env, this.identity.name(), (3 * this.options.nodeBeatIntervalMs) / 1000],
    );
    const unsigned = rows.filter((node) => !this.nodes.signs(node)).map((node) => node.identity);
    if (unsigned.length > 0) return { kind: 'open', unsigned };
    const scope = this.scope;
    const signed = {
      episodes: await this.episodes.signUnsigned(client, scope),
      checkpoints: await this.journal.signUnsigned(client, scope),
      'trigger requests': await this.requests.signUnsigned(client, scope),
      'workflow instances': await this.instances.signUnsigned(client, scope),
    };
    const total = Object.values(signed).reduce((sum, n) => sum + n, 0);
    const { rowCount } = await client.query(
      `INSERT INTO cyclium_integrity_cutovers (source_stack, source_env, recorded_by, signed_rows)
       VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
      [stack, env, this.identity.name(), total],
    );
    return rowCount === 1 ? { kind: 'sealed', signed } : { kind: 'recorded' };
  }
}
