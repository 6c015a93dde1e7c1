import type { QueryConfig } from 'pg';

/**
 * One statement assembled from the CTEs several rooms contribute (each room still owns the SQL of
 * its own table), numbering positional parameters as they are added. It runs as a prepared
 * statement named after its shape: `base` (the choices that change fragment text, such as which
 * claims adapter takes part) and the list of CTEs present, so one name never stands for two texts.
 */
export class Statement {
  private readonly values: unknown[] = [];
  private readonly ctes: string[] = [];
  private readonly names: string[] = [];

  constructor(private readonly base: string) {}

  /** `$n` for `value`, with an optional cast. */
  param(value: unknown, cast?: string): string {
    this.values.push(value);
    return cast ? `$${this.values.length}::${cast}` : `$${this.values.length}`;
  }

  /**
   * `$a::castA, $b::castB, …`: the arrays an `unnest(...)` reads, one parameter per column, in
   * order.
   */
  arrays(columns: ReadonlyArray<readonly [values: readonly unknown[], cast: string]>): string {
    return columns.map(([values, cast]) => this.param(values, cast)).join(', ');
  }

  /** Adds `name AS (body)` to the statement's WITH list. */
  with(name: string, body: string): this {
    this.ctes.push(`${name} AS (${body})`);
    this.names.push(name);
    return this;
  }

  /** The final statement: the CTEs added so far as a `WITH` before `select`. */
  build(select: string): QueryConfig {
    const text = this.ctes.length > 0 ? `WITH ${this.ctes.join(',\n')}\n${select}` : select;
    return {
      name: `cyclium_${this.base}_${fnv1a(this.names.join(','))}`,
      text,
      values: this.values,
    };
  }
}

/** A short, stable hash (32-bit FNV-1a, hex) of the shape: cheap enough to run per statement. */
function fnv1a(text: string): string {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0).toString(16);
}
