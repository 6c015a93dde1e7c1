import { ValidationPipe } from '@nestjs/common';
import * as classTransformer from 'class-transformer';
import * as classValidator from 'class-validator';

/**
 * Queries and bodies checked against their DTOs: an unknown field or a bad value is a 400 naming
 * the field. The packages are handed over rather than looked up, so they resolve from the library.
 */
export function opsValidation(): ValidationPipe {
  return new ValidationPipe({
    transform: true,
    whitelist: true,
    forbidNonWhitelisted: true,
    validatorPackage: classValidator,
    transformerPackage: classTransformer,
  });
}
