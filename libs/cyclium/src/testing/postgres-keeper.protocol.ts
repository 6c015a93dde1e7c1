export interface KeeperRequest {
  dataDir: string;
  port: number;
  persistent: boolean;
}

export type KeeperMessage = { type: 'ready' } | { type: 'stopped' } | { type: 'error'; message: string };
