import { BadRequestException, ValidationPipe, type ValidationError } from '@nestjs/common';

/** The first constraint that failed, deepest field first, its field named from `prefix`. */
export function firstProblem(
  errors: ValidationError[],
  prefix = '',
): { field: string; message: string } | undefined {
  for (const error of errors) {
    const field = `${prefix}${error.property}`;
    const message = Object.values(error.constraints ?? {})[0];
    if (message) return { field, message };
    const nested = firstProblem(error.children ?? [], `${field}.`);
    if (nested) return nested;
  }
  return undefined;
}

/**
 * Request bodies checked against their DTO classes by class-validator, answering as the demo's
 * other 400s do: one message and the `field` it names. A field the DTO does not declare is refused
 * too (a misspelt `delayMS` would otherwise run the episode now).
 */
export function validatedBody(): ValidationPipe {
  return new ValidationPipe({
    transform: true,
    whitelist: true,
    forbidNonWhitelisted: true,
    exceptionFactory: (errors) => {
      const problem = firstProblem(errors) ?? { field: 'body', message: 'the body is not valid' };
      return new BadRequestException({ statusCode: 400, ...problem });
    },
  });
}
