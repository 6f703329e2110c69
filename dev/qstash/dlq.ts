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

  /** One page of entries matching the query's filters (dlqIds, url, messageId, …). */
  page(query: URLSearchParams): { entries: DlqEntry[]; cursor?: string } {
    const count = Math.min(
      MAX_PAGE,
      Math.max(1, Number(query.get("count") ?? MAX_PAGE) || MAX_PAGE),
    );
    const cursor = query.get("cursor") || undefined;
    const matches = [...this.entries.values()].filter((e) => matchesFilter(e, query));
    // The cursor is the next entry's id; if that entry went away meanwhile, resume after it.
    const start = cursor === undefined ? 0 : firstAtOrAfter(matches, cursor);
    const entries = matches.slice(start, start + count);
    const next = matches[start + count];
    return next ? { entries, cursor: next.dlqId } : { entries };
  }
}

function anyOf(query: URLSearchParams, key: string, value: string | undefined): boolean {
  const wanted = query.getAll(key).filter((v) => v !== "");
  return wanted.length === 0 || (value !== undefined && wanted.includes(value));
}

function matchesFilter(entry: DlqEntry, query: URLSearchParams): boolean {
  const { message, attempt } = entry;
  const from = Number(query.get("fromDate") ?? Number.NaN);
  const to = Number(query.get("toDate") ?? Number.NaN);
  const dlqMs = Number(entry.dlqId.split("-")[0]);
  const labels = query.getAll("label");
  return (
    anyOf(query, "dlqIds", entry.dlqId) &&
    anyOf(query, "messageId", message.id) &&
    anyOf(query, "url", message.url) &&
    anyOf(query, "responseStatus", String(attempt.status)) &&
    anyOf(query, "callerIp", message.callerIp) &&
    (labels.length === 0 || labels.some((l) => message.labels.includes(l))) &&
    // No URL groups, schedules, queues or flow control here: filtering by them matches nothing.
    ["topicName", "scheduleId", "queueName", "flowControlKey"].every((key) =>
      anyOf(query, key, undefined),
    ) &&
    (Number.isNaN(from) || dlqMs >= from) &&
    (Number.isNaN(to) || dlqMs <= to)
  );
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
