/**
 * The model servers the operator knows. A new kind is a folder beside `torchserve/`, `oip/` and `vllm/` with a
 * {@link ModelServerDriver}, added here; the controllers know only the driver interface.
 */
import type { Dispatcher } from 'undici';
import { DEFAULT_DRIVER } from '../api/drivers.ts';
import { ModelServerDrivers } from './driver.ts';
import { MLSERVER, OipDriver, TRITON } from './oip/driver.ts';
import { TorchServeDriver } from './torchserve/driver.ts';
import { VllmDriver } from './vllm/driver.ts';
import type { SecretValue } from './secrets.ts';

export interface DriverOptions {
  /** Reads a key of a Secret (the model servers' credentials). */
  secret: SecretValue;
  /** Connection pool toward the model servers (tests reach emulated replicas through it). */
  dispatcher?: Dispatcher | undefined;
}

/**
 * Every driver, TorchServe the default; Triton and MLServer place directories through the agent (oip/), vLLM loads
 * LoRA adapters the agent places (vllm/).
 */
export function modelServerDrivers(opts: DriverOptions): ModelServerDrivers {
  return new ModelServerDrivers(
    [
      new TorchServeDriver(opts),
      new OipDriver(TRITON, opts),
      new OipDriver(MLSERVER, opts),
      new VllmDriver(opts),
    ],
    DEFAULT_DRIVER,
  );
}
