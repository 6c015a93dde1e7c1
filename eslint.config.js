// ESLint flat config: typescript-eslint with type information, Prettier last (it only switches off style rules).
// Type-aware rules read the build's declarations (the tests, the demo and the benchmarks import @cyclium/nestjs
// through its dist/), so `npm test` lints after `npm run build`.
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';

export default defineConfig(
  {
    ignores: [
      '**/dist/**',
      '**/node_modules/**',
      'coverage/**',
      '.cyclium/**',
      'soak/output/**',
      'docs/api/**',
    ],
  },
  js.configs.recommended,
  {
    files: ['**/*.ts'],
    extends: [tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      parserOptions: {
        // The tsconfigs that cover every linted file (test/tsconfig.test.json also holds the library's unit specs).
        project: [
          'libs/cyclium/tsconfig.lib.json',
          'apps/demo/tsconfig.app.json',
          'bench/tsconfig.bench.json',
          'test/tsconfig.test.json',
          'soak/tsconfig.soak.json',
        ],
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      // The promise rules are the reason this config exists: a floating promise is a lost error.
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/no-explicit-any': 'error',
      // An async method without await is how this code turns a throw into a rejection (and keeps an interface's
      // Promise signature); dropping `async` to please the rule would change behaviour.
      '@typescript-eslint/require-await': 'off',
      // Indexed reads are asserted present (`rows[0] as BeginRow`), as if noUncheckedIndexedAccess were on; without
      // it the rule calls 77 of them unnecessary. Types only, no safety: left for a pass after the reshaping.
      '@typescript-eslint/no-unnecessary-type-assertion': 'off',
      // Handing on a caught value (typed unknown) as a rejection is forwarding, not inventing a non-Error reason.
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingUnknown: true }],
      // `_` names a part left out on purpose (`const { op: _, ...fields } = action`).
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', ignoreRestSiblings: true },
      ],
    },
  },
  {
    // Tests, benchmarks and the soak read rows that pg types as `any` (`rows[0].n`): the no-unsafe-* family would
    // flag hundreds of such reads and guards nothing there. The library keeps every one of them.
    files: ['test/**/*.ts', 'bench/**/*.ts', 'soak/**/*.ts', '**/*.spec.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
    },
  },
  {
    // Configuration and test support scripts in plain JavaScript run on Node (the Node globals they use).
    files: ['**/*.js', '**/*.mjs'],
    languageOptions: { globals: { process: 'readonly', URL: 'readonly', console: 'readonly' } },
  },
  {
    // The operations page's script runs in the browser as it is shipped (no bundler): browser globals only.
    files: ['libs/cyclium/assets/**/*.js'],
    languageOptions: {
      sourceType: 'script',
      globals: {
        document: 'readonly',
        location: 'readonly',
        fetch: 'readonly',
        URLSearchParams: 'readonly',
        Node: 'readonly',
        setTimeout: 'readonly',
        setInterval: 'readonly',
        history: 'readonly',
      },
    },
  },
  prettier,
  {
    // After prettier (which switches max-len off): prettier does not wrap comments, strings or
    // template literals, so this keeps every line of the library within prettier's 100 columns.
    files: ['libs/**/*.ts'],
    rules: { 'max-len': ['error', { code: 100, tabWidth: 2 }] },
  },
);
