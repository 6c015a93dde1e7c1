import {
  Body,
  Controller,
  Get,
  HttpCode,
  NotFoundException,
  Post,
  Query,
  UseFilters,
  UseGuards,
  UsePipes,
} from '@nestjs/common';
import { ConflictException, ServiceUnavailableException } from '@nestjs/common';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { Mode } from '../dispatch/mode.service.js';
import { FlowStatusReader, type FlowStatus } from '../episodes/flow-status.js';
import { TriggerRequests } from '../dispatch/trigger-requests.service.js';
import { CycliumStatus } from '../health/cyclium-status.service.js';
import { BusConsumers } from '../health/bus-consumers.service.js';
import { FinishedHistoryReader, type FinishedHistory } from '../health/finished-history.service.js';
import { OpsAccessGuard } from './ops-access.guard.js';
import { OpsExceptionFilter } from './ops-exception.filter.js';
import {
  BusConsumerBody,
  ClusterQuery,
  FlowQuery,
  HistoryQuery,
  ModeBody,
  TriggerRequestListQuery,
} from './ops-queries.dto.js';
import { errorMessage } from '../sql/database-errors.js';
import { opsValidation } from './ops-validation.js';

/** The cluster, this node and its mode, the last hour, flow control and trigger requests. */
@Controller('api')
@UseGuards(OpsAccessGuard)
@UseFilters(OpsExceptionFilter)
@UsePipes(opsValidation())
export class OpsClusterController {
  constructor(
    private readonly status: CycliumStatus,
    private readonly mode: Mode,
    private readonly requests: TriggerRequests,
    private readonly busConsumers: BusConsumers,
    private readonly registry: ActorRegistry,
    private readonly flowStatus: FlowStatusReader,
    private readonly history: FinishedHistoryReader,
  ) {}

  @Get('cluster')
  cluster(@Query() query: ClusterQuery) {
    return this.status.cluster({ windowMs: query.windowMs });
  }

  /**
   * Episodes finished per minute over the last `minutes` (default 60), by terminal status: the
   * page's chart.
   */
  @Get('history')
  finishedHistory(@Query() query: HistoryQuery): Promise<FinishedHistory> {
    return this.history.read(query.minutes ?? 60);
  }

  @Get('nodes')
  async nodes() {
    const { at, nodes } = await this.status.cluster();
    return { at, nodes };
  }

  /** This node, from its own memory: answers while the database is away. */
  @Get('node')
  node() {
    const snapshot = this.status.snapshot();
    return { ...snapshot, modes: this.modes() };
  }

  /**
   * Whether the database answers this node now (one shared `SELECT 1` per 0.4 s, whoever asks): the
   * page asks every half second, so a frozen database shows within about a second and a half.
   */
  @Get('pulse')
  async pulse(): Promise<{ databaseMs: number }> {
    try {
      return { databaseMs: await this.status.databasePing() };
    } catch (error) {
      throw new ServiceUnavailableException(`database unavailable: ${errorMessage(error)}`);
    }
  }

  @Get('mode')
  currentMode() {
    return this.modes();
  }

  @Post('mode')
  @HttpCode(200)
  setMode(@Body() body: ModeBody) {
    this.mode.set(body.mode);
    return this.modes();
  }

  @Get('bus-consumers')
  async listBusConsumers() {
    return { items: await this.busConsumers.list() };
  }

  /**
   * Drops a stored bus position no live node hosts (an expectation removed or renamed), so it stops
   * holding events.
   */
  @Post('bus-consumers/drop')
  @HttpCode(200)
  async dropBusConsumer(@Body() { channel, consumer }: BusConsumerBody) {
    const result = await this.busConsumers.drop(channel, consumer);
    if (result === 'not_found')
      throw new NotFoundException(`no bus position of ${consumer} on ${channel}`);
    if (result === 'hosted')
      throw new ConflictException(`a live node of ${channel} hosts ${consumer}`);
    return { result };
  }

  /**
   * Flow control in this node's env: per limited expectation this node hosts, the episodes running
   * against its concurrency limit and waiting `throttled`, per key (the busiest `keys`, the rest
   * added up), and its rate window.
   */
  @Get('flow')
  flow(@Query() query: FlowQuery): Promise<FlowStatus> {
    const expectations = this.registry.all().flatMap((actor) => [...actor.expectations.values()]);
    // Callers within half a second share one read, as cluster() does.
    return this.flowStatus.read(expectations, query.keys, 500);
  }

  @Get('trigger-requests')
  async triggerRequests(@Query() query: TriggerRequestListQuery) {
    return { items: await this.requests.recent(query.status, query.limit ?? 50) };
  }

  private modes() {
    const { nodeMode, overrides, nodeIdentity, paused } = this.mode.status();
    return { mode: nodeMode, actorOverrides: overrides, pausedActors: paused, nodeIdentity };
  }
}
