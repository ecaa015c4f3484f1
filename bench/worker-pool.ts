/**
 * Forked load generator processes (`loadgen.js`) and a typed request/response call over their IPC channel.
 */
import { fork, type ChildProcess } from 'node:child_process';
import type { LoadgenRequest, LoadgenResponse } from './loadgen.js';

type ArgsOf<K extends LoadgenRequest['op']> = Extract<LoadgenRequest, { op: K }>['args'];

const defaultCallTimeoutMs = 180_000;

export class LoadgenWorker {
  private readonly child: ChildProcess;
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (value: unknown) => void; reject: (err: Error) => void }>();
  private exitReason: string | null = null;

  constructor(
    script: string,
    readonly index: number,
  ) {
    this.child = fork(script, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.child.on('message', (message: LoadgenResponse) => {
      const call = this.pending.get(message.id);
      if (call === undefined) return;
      this.pending.delete(message.id);
      if (message.ok) call.resolve(message.result);
      else call.reject(new Error(`loadgen ${this.index}: ${message.error}`));
    });
    this.child.on('exit', (code, signal) => {
      this.exitReason = `loadgen ${this.index} exited (${String(code ?? signal)})`;
      for (const call of this.pending.values()) call.reject(new Error(this.exitReason));
      this.pending.clear();
    });
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  call<R, K extends LoadgenRequest['op'] = LoadgenRequest['op']>(
    op: K,
    args: ArgsOf<K>,
    timeoutMs = defaultCallTimeoutMs,
  ): Promise<R> {
    if (this.exitReason !== null) return Promise.reject(new Error(this.exitReason));
    const id = this.nextId++;
    return new Promise<R>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`loadgen ${this.index}: ${op} timed out after ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, {
        resolve: (value) => {
          clearTimeout(timer);
          resolve(value as R);
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      });
      this.child.send({ id, op, args });
    });
  }

  kill(): void {
    if (this.exitReason === null) this.child.kill('SIGKILL');
  }
}
