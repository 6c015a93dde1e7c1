import { describe, expect, it, jest } from '@jest/globals';
import type { Logger } from '@nestjs/common';
import { LifecycleReadSet } from './lifecycle-read-set.js';
import { LocalBus } from './local-bus.js';

function readSet(durable: (type: string) => boolean = () => false) {
  const local = new LocalBus();
  const set = new LifecycleReadSet(local, durable, { warn: jest.fn() } as unknown as Logger);
  const told = jest.fn(async () => undefined);
  set.onChange(told);
  const on = (type: string) => set.adding(type, () => local.subscribe(type, () => undefined));
  const quietly = (type: string) =>
    set.undeclaredly(type, () => local.subscribe(type, () => undefined));
  return { set, told, on, quietly };
}

describe('LifecycleReadSet', () => {
  it('names the declared types its handlers take, and tells once per new type', () => {
    const { set, told, on } = readSet();
    on('order.placed');
    expect(set.types()).toEqual([]);
    const off = on('episode.failed');
    on('episode.failed');
    expect(set.types()).toEqual(['episode.failed']);
    expect(told).toHaveBeenCalledTimes(1);
    on('*');
    expect(set.types()).toEqual(['*', 'episode.failed']);
    expect(told).toHaveBeenCalledTimes(2);
    off();
    expect(set.types()).toEqual(['*', 'episode.failed']);
  });

  it('leaves out an undeclared handler, but not a declared one beside it', () => {
    const { set, told, on, quietly } = readSet();
    const off = quietly('episode.completed');
    expect(set.types()).toEqual([]);
    expect(told).not.toHaveBeenCalled();
    on('episode.completed');
    expect(set.types()).toEqual(['episode.completed']);
    off();
    off();
    expect(set.types()).toEqual(['episode.completed']);
  });

  it("counts a durable consumer's type", () => {
    const { set } = readSet((type) => type === 'episode.canceled');
    expect(set.types()).toEqual(['episode.canceled']);
  });
});
