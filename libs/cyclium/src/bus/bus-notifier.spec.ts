import { describe, expect, it } from '@jest/globals';
import { BusNotifier, notifyPayloads } from './bus-notifier.js';

describe('BusNotifier payloads', () => {
  it('sends a bare wake-up as an empty payload, which every node (older ones too) reads as "look"', () => {
    expect(notifyPayloads(true, [])).toEqual(['']);
    expect(notifyPayloads(false, [])).toEqual([]);
    expect(BusNotifier.parse('')).toEqual({ wake: true, tokens: [] });
  });

  it('carries signal tokens with the wake-up on the first payload only, each under the NOTIFY limit', () => {
    const tokens = Array.from({ length: 600 }, (_, i) => i.toString(16).padStart(32, '0'));
    const payloads = notifyPayloads(true, tokens);
    expect(payloads.length).toBeGreaterThan(1);
    expect(payloads.every((p) => Buffer.byteLength(p) < 8000)).toBe(true);
    const heard = payloads.map((p) => BusNotifier.parse(p));
    expect(heard.map((h) => h.wake)).toEqual(payloads.map((_, i) => i === 0));
    expect(heard.flatMap((h) => h.tokens)).toEqual(tokens);
    expect(BusNotifier.parse(notifyPayloads(false, ['a'])[0] as string)).toEqual({ wake: false, tokens: ['a'] });
  });
});
