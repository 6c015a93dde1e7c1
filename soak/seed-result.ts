import type { Violation } from './checker/fault-schedule-checker.js';

/** One seed's verdict, with what ran and the command that replays it. */
export interface SeedResult {
  seed: number;
  processes: boolean;
  claims: boolean;
  layout: string;
  outsider: string;
  shortWindows: boolean;
  wallMs: number;
  quiesced: boolean;
  faults: Record<string, number>;
  clusterStops: number;
  workSent: number;
  episodes: number;
  violations: Violation[];
  replay: string;
  outputDir: string;
  /** The checkout refused the schedule's settings (a boot-time CycliumConfigError): no verdict. */
  refused?: string;
}
