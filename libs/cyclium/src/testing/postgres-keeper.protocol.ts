export interface KeeperRequest {
  dataDir: string;
  port: number;
  persistent: boolean;
  /**
   * The folder startPostgres made for this server, removed by the keeper when its parent dies
   * without stopping it (the parent removes it after a normal stop).
   */
  scratch?: string;
  /** Server settings, passed as `-c name=value`. */
  settings: Record<string, string>;
}

export type KeeperMessage =
  { type: 'ready' } | { type: 'stopped' } | { type: 'error'; message: string };
