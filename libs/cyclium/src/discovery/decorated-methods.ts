import type { MetadataScanner, ReflectableDecorator, Reflector } from '@nestjs/core';

/** A provider method carrying a method decorator's options, bound to its instance. */
export interface DecoratedMethod<T> {
  methodName: string;
  options: T;
  call: (argument: unknown) => Promise<unknown>;
}

/**
 * The methods of `instance` (its prototype chain included) that carry `decorator`, in declaration
 * order.
 */
export function decoratedMethods<T>(
  scanner: MetadataScanner,
  reflector: Reflector,
  decorator: ReflectableDecorator<T>,
  instance: object,
): Array<DecoratedMethod<T>> {
  const found: Array<DecoratedMethod<T>> = [];
  for (const methodName of scanner.getAllMethodNames(
    Object.getPrototypeOf(instance) as object | null,
  )) {
    const method = (instance as Record<string, unknown>)[methodName];
    if (typeof method !== 'function') continue;
    const options = reflector.get(decorator, method) as T | undefined;
    if (!options) continue;
    found.push({
      methodName,
      options,
      call: async (argument) => (method as (a: unknown) => unknown).call(instance, argument),
    });
  }
  return found;
}
