import { BadRequestException, Body, Controller, Get, HttpCode, Post } from '@nestjs/common';
import { CycliumConfigError, Mode, UnknownActorError, type CycliumMode } from '@cyclium/nestjs';

interface ModeRequest {
  /** The node-wide mode. */
  mode?: unknown;
  /** Per actor: a mode, or null to clear its override. */
  overrides?: unknown;
}

/**
 * `GET /mode` shows this node's mode and per-actor overrides; `POST /mode { mode?, overrides? }`
 * changes them at runtime (`{ "mode": "trigger_only" }`, `{ "overrides": { "resource_monitor": null } }`).
 */
@Controller('mode')
export class ModeController {
  constructor(private readonly mode: Mode) {}

  @Get()
  status() {
    return this.mode.status();
  }

  @Post()
  @HttpCode(200)
  change(@Body() body: ModeRequest | undefined) {
    const { mode, overrides } = body ?? {};
    if (overrides !== undefined && (typeof overrides !== 'object' || overrides === null || Array.isArray(overrides))) {
      throw new BadRequestException('overrides must be an object of actor id to mode (or null to clear)');
    }
    try {
      if (mode !== undefined) this.mode.set(mode as CycliumMode);
      for (const [actorId, value] of Object.entries((overrides ?? {}) as Record<string, unknown>)) {
        if (value === null) this.mode.clearActorOverride(actorId);
        else this.mode.setActorOverride(actorId, value as CycliumMode);
      }
    } catch (error) {
      if (error instanceof CycliumConfigError || error instanceof UnknownActorError) throw new BadRequestException(error.message);
      throw error;
    }
    return this.mode.status();
  }
}
