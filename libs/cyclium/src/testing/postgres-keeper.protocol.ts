export interface KeeperRequest {
  dataDir: string;
  port: number;
  persistent: boolean;
  /** Server settings, passed as `-c name=value`. */
  settings: Record<string, string>;
}

export type KeeperMessage = { type: 'ready' } | { type: 'stopped' } | { type: 'error'; message: string };
