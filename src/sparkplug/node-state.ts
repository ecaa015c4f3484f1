/**
 * What the edge node must remember across restarts, in one small JSON file under `storage.path`:
 * - the bdSeq of the last upstream CONNECT sent (Sparkplug 3.0: +1 per CONNECT, 0..255 wrapping
 *   [tck-id-payloads-nbirth-bdseq-increment]; an attempt that never sent its CONNECT does not count), and the
 *   last local session's;
 * - the metric aliases: once assigned, an alias always names the same metric, so data stored in a bridge
 *   outbox before a restart (even one with a changed tag list) still decodes against the current births.
 *
 * Written atomically (temp file, fsync, rename, fsync of the directory), synchronously: the bdSeq of a Will must be
 * on disk before the CONNECT that carries it leaves, so that after a crash at any point the next Will has a new one.
 */
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { asError, StoreError } from '../util/errors.js';

export const STATE_FILE_NAME = 'sparkplug-state.json';

interface StateDocument {
  version: number; // 1; a file with another version is not read
  groupId: string;
  edgeNodeId: string;
  /** bdSeq of the Will in the last upstream CONNECT sent, -1 before the first. */
  uplinkBdSeq: number;
  /** bdSeq of the last local session, -1 before the first. */
  localBdSeq: number;
  nextAlias: number;
  /** `<deviceId>/<metric name>` (node metrics: `/<metric name>`) → alias. */
  aliases: Partial<Record<string, number>>;
}

export class NodeState {
  private doc: StateDocument;
  private readonly file: string;

  /** Loads the state for this node (a file written for another group/node id starts afresh). */
  constructor(dir: string, groupId: string, edgeNodeId: string) {
    this.file = join(dir, STATE_FILE_NAME);
    const fresh: StateDocument = {
      version: 1,
      groupId,
      edgeNodeId,
      uplinkBdSeq: -1,
      localBdSeq: -1,
      nextAlias: 1,
      aliases: {},
    };
    let loaded: StateDocument | undefined;
    try {
      loaded = JSON.parse(readFileSync(this.file, 'utf8')) as StateDocument;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
        throw new StoreError('EF_STORE_OPEN', `cannot read ${this.file}: ${asError(err).message}`, { cause: err });
      }
    }
    this.doc =
      loaded && loaded.version === 1 && loaded.groupId === groupId && loaded.edgeNodeId === edgeNodeId ? loaded : fresh;
  }

  /** The bdSeq the Will of the next upstream CONNECT carries (0..255): the last one sent + 1. */
  nextUplinkBdSeq(): number {
    return (this.doc.uplinkBdSeq + 1) & 0xff;
  }

  /** A CONNECT with this bdSeq in its Will is about to leave: persisted before returning. */
  uplinkBdSeqSent(bdSeq: number): void {
    this.doc.uplinkBdSeq = bdSeq;
    this.save();
  }

  /** Takes the next local-session bdSeq (0..255) and persists it. */
  nextLocalBdSeq(): number {
    this.doc.localBdSeq = (this.doc.localBdSeq + 1) & 0xff;
    this.save();
    return this.doc.localBdSeq;
  }

  /**
   * Aliases for the given metric keys: existing ones are kept, new ones get fresh numbers (never reused, even for
   * metrics that left the config). Saves once if anything was added.
   */
  assignAliases(keys: readonly string[]): Map<string, number> {
    const out = new Map<string, number>();
    let added = false;
    for (const key of keys) {
      let alias = this.doc.aliases[key];
      if (alias === undefined) {
        alias = this.doc.nextAlias++;
        this.doc.aliases[key] = alias;
        added = true;
      }
      out.set(key, alias);
    }
    if (added) this.save();
    return out;
  }

  private save(): void {
    const tmp = `${this.file}.tmp`;
    try {
      mkdirSync(dirname(this.file), { recursive: true });
      const fd = openSync(tmp, 'w', 0o600);
      try {
        writeSync(fd, JSON.stringify(this.doc));
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      renameSync(tmp, this.file);
      const dirFd = openSync(dirname(this.file), 'r');
      try {
        fsyncSync(dirFd);
      } finally {
        closeSync(dirFd);
      }
    } catch (err) {
      throw new StoreError('EF_STORE_WRITE', `cannot write ${this.file}: ${asError(err).message}`, { cause: err });
    }
  }
}
