/** An event the bus refuses to publish, with the reason; nothing was sent. The caller's mistake (a 400). */
export class InvalidBusEventError extends TypeError {
  override readonly name = 'InvalidBusEventError';
}
