import { Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { TerminusModule } from '@nestjs/terminus';
import { TypeOrmModule } from '@nestjs/typeorm';
import { CycliumModule, cycliumEntities, cycliumOptionsFromEnv } from '@cyclium/nestjs';
import { HealthController } from './health/health.controller.js';
import { NodeController } from './node/node.controller.js';

@Module({
  imports: [
    TypeOrmModule.forRootAsync({
      useFactory: () => ({
        type: 'postgres',
        url: process.env.DATABASE_URL,
        entities: [...cycliumEntities],
        extra: { max: Number(process.env.DEMO_DB_POOL ?? 10) },
      }),
    }),
    ScheduleModule.forRoot(),
    TerminusModule,
    CycliumModule.forRoot(cycliumOptionsFromEnv(process.env)),
  ],
  controllers: [HealthController, NodeController],
})
export class AppModule {}
