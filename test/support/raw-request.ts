import { request as httpRequest } from 'node:http';

/**
 * One request through node:http, which (unlike fetch) sends the `Host` it is given; the body read
 * as JSON (`{}` when it is not JSON).
 */
export async function rawRequest(
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: unknown },
): Promise<{ status: number; body: { field?: string } }> {
  const request = new Request(url, init as RequestInit);
  const body = init.body === undefined ? undefined : Buffer.from(await request.arrayBuffer());
  const headers: Record<string, string> = Object.fromEntries(request.headers);
  Object.assign(headers, init.headers ?? {});
  if (body !== undefined) headers['content-length'] = String(body.length);
  return new Promise((resolve, reject) => {
    const sent = httpRequest(url, { method: init.method ?? 'GET', headers }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (text += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body: jsonOf(text) }));
    });
    sent.on('error', reject);
    sent.end(body);
  });
}

function jsonOf(text: string): { field?: string } {
  try {
    return JSON.parse(text) as { field?: string };
  } catch {
    return {};
  }
}
