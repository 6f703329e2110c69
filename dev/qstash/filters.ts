/**
 * The query filters of QStash's bulk endpoints (DELETE /v2/messages, GET/DELETE /v2/dlq,
 * POST /v2/dlq/retry), as the API documents them: each filter takes several values (repeated,
 * or comma-separated) that OR together, different filters AND together, fromDate/toDate are
 * inclusive unix ms. A key the endpoint does not document, or an empty value, is refused
 * with a 400, and a documented one the stand-in does not implement with a 501: ignoring
 * either would widen a bulk cancel or delete to every message.
 */

/** What a filter is matched against: one message, or one DLQ entry. */
export interface Filterable {
  /** What the ids key (messageIds or dlqIds) names. */
  id: string;
  messageId: string;
  url: string;
  callerIp: string;
  labels: readonly string[];
  /** Unix ms the filter's fromDate/toDate compare with. */
  at: number;
  responseStatus?: number;
}

export type Filter = (item: Filterable) => boolean;

export type ParsedFilter =
  | { outcome: "ok"; match: Filter; count?: number; cursor?: string }
  | { outcome: "refused"; status: 400 | 501; error: string };

export interface FilterSpec {
  /** The endpoint, for error messages: "DELETE /v2/messages". */
  endpoint: string;
  /** The key that lists exact ids; when given, the other filters are ignored (documented). */
  idsKey: "messageIds" | "dlqIds";
  /** Every other documented key, beyond the shared ones below. */
  extra: readonly string[];
  /** Documented keys the stand-in does not implement: answered 501. */
  unsupported?: readonly string[];
  /** Paging by `count` (1..max) and `cursor`; without it `cursor` is an unknown key. */
  paging?: { max: number };
  /** `count` accepted and ignored (the SDK: "ignored by the server" for bulk cancel). */
  ignoreCount?: boolean;
}

/** Filters on things the stand-in has none of: they match nothing, as in a QStash without them. */
const ABSENT = ["topicName", "scheduleId", "queueName", "flowControlKey"] as const;
const SHARED = ["url", "label", "callerIp", "fromDate", "toDate", ...ABSENT] as const;

const values = (query: URLSearchParams, key: string) =>
  query.getAll(key).flatMap((v) => v.split(",").map((s) => s.trim()));

export function parseFilter(query: URLSearchParams, spec: FilterSpec): ParsedFilter {
  const known = new Set<string>([spec.idsKey, ...SHARED, ...spec.extra]);
  if (spec.paging) known.add("cursor");
  if (spec.paging || spec.ignoreCount) known.add("count");
  const unsupported = new Set(spec.unsupported ?? []);
  const refuse = (status: 400 | 501, error: string): ParsedFilter => ({
    outcome: "refused",
    status,
    error,
  });

  for (const key of new Set(query.keys())) {
    if (unsupported.has(key))
      return refuse(
        501,
        `filter ${key} is not supported by the qstash stand-in (${spec.endpoint})`,
      );
    if (!known.has(key))
      return refuse(
        400,
        `unknown filter ${key} for ${spec.endpoint}; accepted: ${[...known].join(", ")}`,
      );
    if (key !== "cursor" && key !== "count" && values(query, key).some((v) => v === ""))
      return refuse(400, `empty value for filter ${key}`);
  }

  let count: number | undefined;
  const rawCount = query.get("count");
  if (rawCount !== null && spec.paging) {
    if (!/^\d+$/.test(rawCount) || Number(rawCount) < 1)
      return refuse(400, `invalid count: ${rawCount}`);
    count = Math.min(Number(rawCount), spec.paging.max);
  }
  const dates: Partial<Record<"fromDate" | "toDate", number>> = {};
  for (const key of ["fromDate", "toDate"] as const) {
    const raw = query.get(key);
    if (raw === null) continue;
    if (!/^\d+$/.test(raw)) return refuse(400, `invalid ${key}: ${raw} (unix milliseconds)`);
    dates[key] = Number(raw);
  }
  const cursor = query.get("cursor") || undefined;
  const paging = { ...(count === undefined ? {} : { count }), ...(cursor ? { cursor } : {}) };

  const ids = values(query, spec.idsKey);
  if (ids.length > 0) {
    const wanted = new Set(ids);
    return { outcome: "ok", match: (item) => wanted.has(item.id), ...paging };
  }

  const anyOf = (key: string, actual: string | undefined) => {
    const wanted = values(query, key);
    return wanted.length === 0 || (actual !== undefined && wanted.includes(actual));
  };
  const labels = values(query, "label");
  const match: Filter = (item) =>
    anyOf("messageId", item.messageId) &&
    anyOf("url", item.url) &&
    anyOf("callerIp", item.callerIp) &&
    anyOf("callerIP", item.callerIp) &&
    anyOf(
      "responseStatus",
      item.responseStatus === undefined ? undefined : String(item.responseStatus),
    ) &&
    (labels.length === 0 || labels.some((l) => item.labels.includes(l))) &&
    ABSENT.every((key) => anyOf(key, undefined)) &&
    (dates.fromDate === undefined || item.at >= dates.fromDate) &&
    (dates.toDate === undefined || item.at <= dates.toDate);
  return { outcome: "ok", match, ...paging };
}

/** DELETE /v2/messages: documented filters, host/path refused (their matching is unspecified). */
export const CANCEL_FILTERS: FilterSpec = {
  endpoint: "DELETE /v2/messages",
  idsKey: "messageIds",
  extra: ["callerIP"],
  unsupported: ["host", "path"],
  ignoreCount: true,
};

/** GET and DELETE /v2/dlq, POST /v2/dlq/retry. host/path are refused by QStash's DLQ too. */
export const DLQ_FILTERS = (endpoint: string): FilterSpec => ({
  endpoint,
  idsKey: "dlqIds",
  extra: ["messageId", "responseStatus"],
  paging: { max: 100 },
});
