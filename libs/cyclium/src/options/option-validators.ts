import { ValidateBy, type ValidationOptions } from 'class-validator';
import { integrityProblem } from './integrity-options.js';

/** The validators of the options' schema that class-validator does not ship. */

function implementsAll(value: unknown, methods: readonly string[]): boolean {
  return (
    typeof value === 'object' &&
    value !== null &&
    methods.every((m) => typeof (value as Record<string, unknown>)[m] === 'function')
  );
}

export function OneOfOr(
  literals: readonly unknown[],
  methods: readonly string[],
  options: ValidationOptions,
) {
  return ValidateBy(
    {
      name: 'oneOfOrImplementation',
      validator: { validate: (value) => literals.includes(value) || implementsAll(value, methods) },
    },
    options,
  );
}

export function IsNonEmptyStringOrFunction(options: ValidationOptions) {
  return ValidateBy(
    {
      name: 'nonEmptyStringOrFunction',
      validator: {
        validate: (v) => typeof v === 'function' || (typeof v === 'string' && v.trim() !== ''),
      },
    },
    options,
  );
}

export function IsPositiveNumber(options: ValidationOptions) {
  return ValidateBy(
    {
      name: 'positiveNumber',
      validator: { validate: (v) => typeof v === 'number' && Number.isFinite(v) && v > 0 },
    },
    options,
  );
}

/**
 * A URL pg can connect with; only the postgres bus opens a LISTEN connection, so elsewhere it would
 * be ignored.
 */
export function IsPostgresUrl(options: ValidationOptions) {
  return ValidateBy(
    {
      name: 'postgresUrl',
      validator: {
        validate: (v, args) => {
          const bus = (args?.object as { bus?: unknown } | undefined)?.bus;
          if (typeof v !== 'string' || (bus !== undefined && bus !== 'postgres')) return false;
          return URL.canParse(v) && ['postgres:', 'postgresql:'].includes(new URL(v).protocol);
        },
      },
    },
    options,
  );
}

/** The `integrity` option, named field by field (see integrityProblem). */
export function IsIntegrityOptions() {
  return ValidateBy(
    { name: 'integrity', validator: { validate: (v) => integrityProblem(v) === null } },
    { message: (a) => integrityProblem(a.value) ?? '' },
  );
}
