// Lint gate (`npm run lint`, part of `npm test` and CI): typescript-eslint's recommended rules, plus the type-aware
// rules that catch real bugs in an event-driven server: promises nobody awaits or handles, promises passed where a
// callback's result is ignored, and conditions the types say are always true or false. Formatting is Prettier's
// (`npm run format`), checked by `npm run lint` too.
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'release/**', 'console/vite.config.ts'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  { files: ['**/*.js', '**/*.mjs'], languageOptions: { globals: globals.node } },
  {
    rules: {
      // Every control character in a regex here is deliberate: NUL refused in topics and ids (MQTT and Sparkplug
      // forbid it), Latin-1 ranges starting at \u0000, ANSI colour escapes stripped from a library's messages.
      'no-control-regex': 'off',
    },
  },
  {
    files: ['**/*.ts', '**/*.tsx'],
    languageOptions: {
      parserOptions: {
        project: ['./tsconfig.test.json', './console/tsconfig.json'],
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/no-unnecessary-condition': 'error',
      // Names starting with _ are deliberately unused (a destructuring that drops fields, a required parameter).
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
);
