import { Controller, Get } from '@nestjs/common';
import { Env, NodeIdentity, StackSlug } from '@cyclium/nestjs';

/** Who this node is, as the library sees it. */
@Controller('node')
export class NodeController {
  constructor(
    private readonly identity: NodeIdentity,
    private readonly stack: StackSlug,
    private readonly env: Env,
  ) {}

  @Get()
  describe() {
    return { identity: this.identity.name(), stack: this.stack.current(), env: this.env.current(), pid: process.pid };
  }
}
