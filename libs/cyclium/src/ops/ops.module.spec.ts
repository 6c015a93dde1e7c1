import { describe, expect, it } from '@jest/globals';
import { CycliumConfigError } from '../options/cyclium-config.error.js';
import { CycliumOpsModule } from './ops.module.js';

describe('CycliumOpsModule.forRoot', () => {
  it('refuses allowedHosts but a non-empty list of host names without ports, naming it', () => {
    for (const allowedHosts of [[], ['ops.example.com:443'], [''], 'localhost', [7]]) {
      const forRoot = () =>
        CycliumOpsModule.forRoot({ guard: false, allowedHosts: allowedHosts as string[] });
      expect(forRoot).toThrow(CycliumConfigError);
      expect(forRoot).toThrow(/allowedHosts must be a non-empty list/);
    }
  });

  it('takes host names, IP addresses and bracketed IPv6 addresses', () => {
    const allowedHosts = ['ops.example.com', 'localhost', '127.0.0.1', '[::1]'];
    expect(CycliumOpsModule.forRoot({ guard: false, allowedHosts }).module).toBe(CycliumOpsModule);
  });

  it("refuses a scope but 'own' or 'all', naming it", () => {
    for (const scope of ['mine', '', null, 1]) {
      const forRoot = () =>
        CycliumOpsModule.forRoot({ guard: false, scope: scope as 'own' | 'all' });
      expect(forRoot).toThrow(/scope must be 'own'/);
    }
    expect(CycliumOpsModule.forRoot({ guard: false, scope: 'all' }).module).toBe(CycliumOpsModule);
  });
});
