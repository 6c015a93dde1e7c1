/**
 * A workflow that cannot run as declared (thrown at boot, naming the class and step), or one this
 * node does not declare.
 */
export class WorkflowDefinitionError extends Error {
  override readonly name = 'WorkflowDefinitionError';
}

/**
 * A start whose input or subject cannot be used; nothing was written. The caller's mistake (a 400).
 */
export class InvalidWorkflowInputError extends TypeError {
  override readonly name = 'InvalidWorkflowInputError';
}
