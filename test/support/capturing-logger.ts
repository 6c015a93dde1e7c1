import type { LoggerService } from '@nestjs/common';

export type Level = 'error' | 'warn' | 'log' | 'debug' | 'verbose' | 'fatal';
export interface Line {
  level: Level;
  context: string;
  text: string;
}

/** What a host's logger receives through `app.useLogger`: every line Cyclium writes goes through Nest's Logger. */
export class CapturingLogger implements LoggerService {
  readonly lines: Line[] = [];
  private add(level: Level, message: unknown, rest: unknown[]): void {
    // Nest passes the context last; an error's stack, when given, comes before it.
    const context = typeof rest[rest.length - 1] === 'string' ? String(rest.pop()) : '';
    // An Error logged as such prints its stack with Nest's console logger: keep it, so a test can see the dump.
    const show = (part: unknown) =>
      typeof part === 'string'
        ? part
        : part instanceof Error
          ? (part.stack ?? part.message)
          : JSON.stringify(part);
    // Logger.error adds an empty stack slot before the context when none was given.
    const text = [message, ...rest]
      .filter((part) => part !== undefined)
      .map(show)
      .join('\n');
    this.lines.push({ level, context, text });
  }
  log = (message: unknown, ...rest: unknown[]) => this.add('log', message, rest);
  error = (message: unknown, ...rest: unknown[]) => this.add('error', message, rest);
  warn = (message: unknown, ...rest: unknown[]) => this.add('warn', message, rest);
  debug = (message: unknown, ...rest: unknown[]) => this.add('debug', message, rest);
  verbose = (message: unknown, ...rest: unknown[]) => this.add('verbose', message, rest);
  fatal = (message: unknown, ...rest: unknown[]) => this.add('fatal', message, rest);

  about(needle: string): Line[] {
    return this.lines.filter((line) => line.text.includes(needle));
  }
}

export const aboveDebug = (line: Line) => line.level !== 'debug' && line.level !== 'verbose';
export const STACK_LINE = /\n\s+at /;
