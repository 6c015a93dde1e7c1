/**
 * Thrown at boot when another live process already runs a node under this identity: its row in
 * `cyclium_nodes` kept beating, with a boot id of its own, while this one waited to see. Two
 * processes under one identity would renew, recover and adopt each other's work as their own.
 */
export class DuplicateNodeIdentityError extends Error {
  override readonly name = 'DuplicateNodeIdentityError';

  constructor(
    readonly identity: string,
    /** The boot id of the process that holds the identity. */
    readonly otherBootId: string,
  ) {
    super(
      `node identity "${identity}" is already in use by another live process (boot id ` +
        `${otherBootId}), which is still beating: ` +
        `give each process its own nodeIdentity, or leave it unset to mint one per process`,
    );
  }
}
