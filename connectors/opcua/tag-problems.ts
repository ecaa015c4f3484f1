/**
 * What the OPC UA connector reports once per connector, however often the runtime restarts it: a tag it left
 * out, a start failure only the operator can fix, a server that could not describe its nodes. The runtime logs
 * the retries themselves (docs/architecture.md#connectors-never-retry).
 */
import { ConnectorError, errorLogFields } from '../../src/util/errors.js';
import type { Logger } from '../../src/util/logger.js';
import { UntrustedServerError } from './open-session.js';

/** A tag the connector could not set up, as reported (once) in the log. */
export interface TagProblem {
  readonly tag: string;
  readonly reason: string;
}

export class TagProblems {
  /** Problems already logged. */
  private readonly reported = new Set<string>();
  private readonly problemList: TagProblem[] = [];

  constructor(
    private readonly log: Logger,
    private readonly endpoint: string,
  ) {}

  /** Tags left out at start, with the reason. */
  get list(): readonly TagProblem[] {
    return this.problemList;
  }

  /** Reports problem `reason` for `tag`; an error leaves the tag out and is listed, a warning is only logged. */
  tag(tag: string, reason: string, level: 'error' | 'warn' = 'error'): void {
    if (!this.first(`${tag}\u0000${reason}`)) return;
    if (level === 'error') this.problemList.push({ tag, reason });
    this.log[level]({ tag, reason }, `opcua tag ${tag}: ${reason}`);
  }

  /** Tag properties the server could not say: the tags run without them. */
  propertiesIncomplete(reason: string): void {
    if (this.first(reason)) this.log.warn({ endpoint: this.endpoint, reason }, 'opcua tag properties incomplete');
  }

  /**
   * A start failure only the operator can fix (an untrusted server certificate, a rejected user, a security
   * mode the server lacks) is logged as an error.
   */
  operatorAction(err: ConnectorError): void {
    if (!(err instanceof UntrustedServerError) && err.retryable) return;
    if (!this.first(err.message)) return;
    if (err instanceof UntrustedServerError) {
      this.log.error(
        {
          endpoint: this.endpoint,
          thumbprint: err.thumbprint,
          status: err.status,
          rejectedDir: err.rejectedDir,
          trustedDir: err.trustedDir,
        },
        err.message,
      );
    } else {
      this.log.error({ endpoint: this.endpoint, ...errorLogFields(err) }, err.message);
    }
  }

  private first(key: string): boolean {
    if (this.reported.has(key)) return false;
    this.reported.add(key);
    return true;
  }
}
