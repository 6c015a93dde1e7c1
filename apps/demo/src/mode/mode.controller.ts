import { BadRequestException, Body, Controller, Get, HttpCode, Post } from '@nestjs/common';
import { Mode, UnknownActorError, type CycliumMode } from '@cyclium/nestjs';

import { MODES, ModeChangeBody } from '../http/request-bodies.dto.js';
import { validatedBody } from '../http/validated-body.pipe.js';

/**
 * `GET /mode` shows this node's mode and per-actor overrides; `POST /mode { mode?, overrides? }`
 * changes them at runtime (`{ "mode": "trigger_only" }`, `{ "overrides": { "resource_monitor": null } }`).
 * A request with a bad field changes nothing and answers 400 naming it (`mode`,
 * `overrides.<actorId>`).
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
    const changes = Object.entries((overrides ?? {}) as Record<string, unknown>);
    for (const [actorId, value] of changes)
      if (value !== null && !(MODES as readonly unknown[]).includes(value))
        throw refused(
          `overrides.${actorId}`,
          `overrides.${actorId} must be one of: ${MODES.join(', ')}, or null to clear it`,
        );
    const before = this.mode.status().overrides;
    try {
      for (const [actorId, value] of changes) {
        if (value === null) this.mode.clearActorOverride(actorId);
        else this.mode.setActorOverride(actorId, value as CycliumMode);
      }
    } catch (error) {
      if (!(error instanceof UnknownActorError)) throw error;
      this.restore(before);
      throw refused(`overrides.${error.actorId}`, error.message);
    }
    if (mode !== undefined) this.mode.set(mode);
    return this.mode.status();
  }

  /** Puts the overrides back as they were before a request that named an unknown actor. */
  private restore(overrides: Record<string, CycliumMode>): void {
    this.mode.clearAllOverrides();
    for (const [actorId, value] of Object.entries(overrides))
      this.mode.setActorOverride(actorId, value);
  }
}

function refused(field: string, message: string): BadRequestException {
  return new BadRequestException({ statusCode: 400, message, field });
}
