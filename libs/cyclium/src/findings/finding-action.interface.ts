/** What an episode concludes about a subject; persisted in the post-converge transaction. */
export type FindingAction =
  /**
   * Opens the finding, or refreshes the active one with the same key (one active per key and env).
   */
  | {
      op: 'raise';
      key: string;
      class?: string;
      severity?: string;
      subject?: string;
      summary?: string;
      evidence?: unknown;
    }
  /** Changes fields of the active finding; nothing happens when none is active. */
  | {
      op: 'update';
      key: string;
      class?: string;
      severity?: string;
      subject?: string;
      summary?: string;
      evidence?: unknown;
    }
  /** Closes the active finding; nothing happens when none is active. */
  | { op: 'clear'; key: string };
