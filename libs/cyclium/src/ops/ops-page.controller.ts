import {
  Controller,
  Get,
  Header,
  NotFoundException,
  Param,
  Req,
  StreamableFile,
  UseFilters,
  UseGuards,
} from '@nestjs/common';
import { readFile } from 'node:fs/promises';
import { OpsAccessGuard } from './ops-access.guard.js';
import { OpsExceptionFilter } from './ops-exception.filter.js';

/**
 * The page's files ship in the package, next to `dist`: no build step and no CDN, so it works
 * offline.
 */
const ASSETS = new URL('../../assets/ops/', import.meta.url);

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

const ASSET_NAME = /^[a-z0-9-]+(\.[a-z0-9-]+)*\.(html|js|css|svg)$/;

/**
 * The page runs only its own files (no inline script or style, nothing from elsewhere), talks only
 * to its own API, and may not be framed: another site cannot overlay its buttons (clickjacking).
 */
const CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'self'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** The operations page: one HTML file and its assets, read once and kept. */
@Controller()
@UseGuards(OpsAccessGuard)
@UseFilters(OpsExceptionFilter)
export class OpsPageController {
  private readonly files = new Map<string, Promise<Buffer>>();

  /**
   * The page learns where it is mounted from a `<base>` written into it, so relative links and API
   * calls work under any path and global prefix, with or without a trailing slash.
   */
  @Get()
  @Header('Content-Security-Policy', CSP)
  @Header('X-Frame-Options', 'DENY')
  @Header('X-Content-Type-Options', 'nosniff')
  @Header('Referrer-Policy', 'no-referrer')
  async page(@Req() request: { url: string }): Promise<StreamableFile> {
    const path = request.url.split('?')[0];
    const base = path.endsWith('/') ? path : `${path}/`;
    const html = (await this.read('index.html'))
      .toString('utf8')
      .replace('<head>', `<head><base href="${escapeAttribute(base)}">`);
    return new StreamableFile(Buffer.from(html), { type: TYPES['.html'] });
  }

  @Get('assets/:file')
  @Header('Content-Security-Policy', CSP)
  @Header('X-Content-Type-Options', 'nosniff')
  async asset(@Param('file') file: string): Promise<StreamableFile> {
    if (!ASSET_NAME.test(file)) throw new NotFoundException(`no asset ${file}`);
    const type = TYPES[file.slice(file.lastIndexOf('.'))];
    return new StreamableFile(await this.read(file), { type });
  }

  private read(file: string): Promise<Buffer> {
    let content = this.files.get(file);
    if (!content) {
      content = readFile(new URL(file, ASSETS)).catch((error: unknown) => {
        this.files.delete(file);
        if ((error as { code?: string }).code === 'ENOENT')
          throw new NotFoundException(`no asset ${file}`);
        throw error;
      });
      this.files.set(file, content);
    }
    return content;
  }
}

function escapeAttribute(value: string): string {
  return value.replace(/[&"<>]/g, (c) => `&#${c.charCodeAt(0)};`);
}
