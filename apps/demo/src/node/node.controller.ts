import { Controller, Get } from '@nestjs/common';
import { CycliumStatus, Env, NodeIdentity, StackSlug } from '@cyclium/nestjs';

/** Who this node is, as the library sees it, and how its last recovery passes went. */
@Controller('node')
export class NodeController {
  constructor(
    private readonly identity: NodeIdentity,
    private readonly stack: StackSlug,
    private readonly env: Env,
    private readonly status: CycliumStatus,
  ) {}

  @Get()
  describe() {
    const { lastSweep, lastReconcile } = this.status.snapshot();
    return {
      identity: this.identity.name(),
      stack: this.stack.current(),
      env: this.env.current(),
      pid: process.pid,
      lastSweep,
      lastReconcile,
    };
  }
}
