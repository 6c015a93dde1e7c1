import { BadRequestException, Body, Controller, Get, HttpCode, Post } from '@nestjs/common';
import { CycliumConfigError, Mode, UnknownActorError, type CycliumMode } from '@cyclium/nestjs';

import { ModeChangeBody } from '../http/request-bodies.dto.js';
import { validatedBody } from '../http/validated-body.pipe.js';

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
  change(@Body(validatedBody()) { mode, overrides }: ModeChangeBody) {
    try {
      if (mode !== undefined) this.mode.set(mode as CycliumMode);
      for (const [actorId, value] of Object.entries((overrides ?? {}) as Record<string, unknown>)) {
        if (value === null) this.mode.clearActorOverride(actorId);
        else this.mode.setActorOverride(actorId, value as CycliumMode);
      }
    } catch (error) {
      if (error instanceof CycliumConfigError || error instanceof UnknownActorError)
        throw new BadRequestException(error.message);
      throw error;
    }
    return this.mode.status();
  }
}
