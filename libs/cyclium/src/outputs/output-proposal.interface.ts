/** Something an episode wants delivered, exactly once across the cluster. */
export interface OutputProposal<P = unknown> {
  /** Routes it to the `@OutputAdapter(type)` provider. */
  type: string;
  payload: P;
  /**
   * The output's identity. Explicit keys are scoped by env and shared across episodes (two
   * episodes proposing one key deliver once); without one, the key derives from the episode's.
   */
  key?: string;
}
