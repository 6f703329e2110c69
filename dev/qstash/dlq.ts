import type { Attempt } from "./delivery.ts";
import type { Message } from "./message.ts";
import type { DlqEntry } from "./views.ts";

export const MAX_PAGE = 100;

/**
 * The dead-letter queue: oldest first, ids like Redis stream ids ("1725323658779-0"), which is
 * what QStash's look like. The cursor is the dlqId to resume from.
 */
export class DeadLetters {
  private readonly entries = new Map<string, DlqEntry>();
  private lastMs = 0;
  private seq = 0;

  get size(): number {
    return this.entries.size;
  }

  add(message: Message, attempt: Attempt, now: number): DlqEntry {
    const ms = Math.max(now, this.lastMs);
    this.seq = ms === this.lastMs ? this.seq + 1 : 0;
    this.lastMs = ms;
    const entry: DlqEntry = { dlqId: `${ms}-${this.seq}`, message, attempt };
    this.entries.set(entry.dlqId, entry);
    return entry;
  }

  get(dlqId: string): DlqEntry | undefined {
    return this.entries.get(dlqId);
  }

  delete(dlqId: string): boolean {
    return this.entries.delete(dlqId);
  }

  /** One page of entries, oldest first: `count` of them (at most 100) from `cursor` on. */
  page(options: { count?: number; cursor?: string }): { entries: DlqEntry[]; cursor?: string } {
    const count = Math.min(options.count ?? MAX_PAGE, MAX_PAGE);
    const all = [...this.entries.values()];
    // The cursor is the next entry's id; if that entry went away meanwhile, resume after it.
    const start = options.cursor === undefined ? 0 : firstAtOrAfter(all, options.cursor);
    const entries = all.slice(start, start + count);
    const next = all[start + count];
    return next ? { entries, cursor: next.dlqId } : { entries };
  }
}

function idOrder(dlqId: string): [number, number] {
  const [ms, seq] = dlqId.split("-");
  return [Number(ms), Number(seq)];
}

function firstAtOrAfter(entries: DlqEntry[], cursor: string): number {
  const [cms, cseq] = idOrder(cursor);
  const index = entries.findIndex((e) => {
    const [ms, seq] = idOrder(e.dlqId);
    return ms > cms || (ms === cms && seq >= cseq);
  });
  return index === -1 ? entries.length : index;
}
