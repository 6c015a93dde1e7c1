import net from 'node:net';

/** What to do with one chunk passing through the proxy. */
export type ChunkVerdict = 'forward' | 'drop' | 'drop-and-close';

/** One client connection and its upstream twin. */
export interface ProxyConnection {
  readonly id: number;
  /** Cuts both sides at once, as a dead peer or a pooler reload would. */
  destroy(): void;
}

export interface TcpProxyOptions {
  /** The `postgres://` URL whose host and port the proxy forwards to. */
  readonly target: string;
  /** Called for each chunk a client sends; the default forwards it. */
  readonly onClientData?: (chunk: Buffer, connection: ProxyConnection) => ChunkVerdict;
  /** Called for each chunk the server answers; the default forwards it. */
  readonly onServerData?: (chunk: Buffer, connection: ProxyConnection) => ChunkVerdict;
}

interface Pair extends ProxyConnection {
  readonly client: net.Socket;
  upstream?: net.Socket;
}

/**
 * A TCP proxy in front of PostgreSQL for fault tests: it can freeze (stop forwarding in both
 * directions while every socket stays open, which is what a frozen server or a half-open network
 * path looks like from a client), cut every connection, or drop single chunks (a reply lost after
 * the server committed).
 */
export class TcpProxy {
  private readonly pairs = new Set<Pair>();
  private frozen = false;
  private nextId = 1;

  private constructor(
    private readonly server: net.Server,
    private readonly options: TcpProxyOptions,
  ) {}

  static async start(options: TcpProxyOptions): Promise<TcpProxy> {
    const server = net.createServer();
    const proxy = new TcpProxy(server, options);
    server.on('connection', (socket) => proxy.accept(socket));
    server.on('error', () => undefined);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return proxy;
  }

  get port(): number {
    return (this.server.address() as net.AddressInfo).port;
  }

  /** `url` (any database on the target server) rewritten to go through this proxy. */
  url(url: string): string {
    const rewritten = new URL(url);
    rewritten.hostname = '127.0.0.1';
    rewritten.port = String(this.port);
    return rewritten.toString();
  }

  /** Open connections now. */
  get connections(): number {
    return this.pairs.size;
  }

  /** Stops forwarding both ways; sockets stay open and new ones are accepted but not served. */
  freeze(): void {
    this.frozen = true;
    for (const pair of this.pairs) {
      pair.client.pause();
      pair.upstream?.pause();
    }
  }

  /** Forwards again, including what waited while frozen. */
  thaw(): void {
    this.frozen = false;
    for (const pair of this.pairs) {
      if (!pair.upstream) this.connectUpstream(pair);
      pair.client.resume();
      pair.upstream?.resume();
    }
  }

  /** Cuts every open connection. */
  dropAll(): void {
    for (const pair of [...this.pairs]) pair.destroy();
  }

  async close(): Promise<void> {
    this.dropAll();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: net.Socket): void {
    const pair: Pair = {
      id: this.nextId++,
      client,
      destroy: () => {
        client.destroy();
        pair.upstream?.destroy();
        this.pairs.delete(pair);
      },
    };
    this.pairs.add(pair);
    client.on('error', () => pair.destroy());
    client.on('close', () => pair.destroy());
    if (this.frozen) client.pause();
    else this.connectUpstream(pair);
  }

  private connectUpstream(pair: Pair): void {
    const target = new URL(this.options.target);
    const upstream = net.connect(
      Number(target.port || 5432),
      target.hostname === 'localhost' ? '127.0.0.1' : target.hostname,
    );
    pair.upstream = upstream;
    upstream.on('error', () => pair.destroy());
    upstream.on('close', () => pair.destroy());
    this.pipe(pair.client, upstream, pair, this.options.onClientData);
    this.pipe(upstream, pair.client, pair, this.options.onServerData);
  }

  private pipe(
    from: net.Socket,
    to: net.Socket,
    pair: Pair,
    judge: ((chunk: Buffer, connection: ProxyConnection) => ChunkVerdict) | undefined,
  ): void {
    from.on('data', (chunk: Buffer) => {
      const verdict = judge ? judge(chunk, pair) : 'forward';
      if (verdict === 'forward') to.write(chunk);
      else if (verdict === 'drop-and-close') pair.destroy();
    });
  }
}
