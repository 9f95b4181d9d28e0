import 'vitest';

declare module 'vitest' {
  export interface ProvidedContext {
    kubeconfigPath: string;
    apiserverVersion: string;
  }
}
