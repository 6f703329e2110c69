/** The run's arrivals and mix, drawn from a seed, and the body each job is enqueued with. */

const EXTRACT_SCHEMA = {
  type: "object",
  properties: {
    name: { type: "string" },
    city: { type: ["string", "null"] },
    items: { type: "array", items: { type: "string" }, maxItems: 3 },
  },
  required: ["name", "city", "items"],
  additionalProperties: false,
};

export type Plan = "free" | "pro" | "team";
type Scenario = "ok" | "cancel_queued" | "cancel_running" | "server_error" | "bad_request";

export interface Planned {
  at: number;
  plan: Plan;
  kind: "document" | "extract";
  scenario: Scenario;
  inject429: boolean;
  follow: boolean;
  tokens: number;
}

/** mulberry32: a small seeded PRNG, so a run's mix can be drawn again. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The arrivals and the mix: plans 30/55/15 % free/pro/team, a quarter of paid jobs extractions. */
export function plan(o: {
  seconds: number;
  rate: number;
  seed?: number;
  pollShare?: number;
}): Planned[] {
  const rnd = prng(o.seed ?? 1);
  const jobs: Planned[] = [];
  let t = 0;
  for (;;) {
    t += -Math.log(1 - rnd()) / o.rate;
    if (t >= o.seconds) break;
    const p = rnd();
    const planOf: Plan = p < 0.3 ? "free" : p < 0.85 ? "pro" : "team";
    const kind = planOf !== "free" && rnd() < 0.25 ? "extract" : "document";
    const s = rnd();
    const scenario: Scenario =
      s < 0.03
        ? "cancel_queued"
        : s < 0.06
          ? "cancel_running"
          : s < 0.07
            ? "server_error"
            : s < 0.075
              ? "bad_request"
              : "ok";
    jobs.push({
      at: t * 1000,
      plan: planOf,
      kind,
      scenario,
      inject429: rnd() < 0.03,
      follow: scenario === "cancel_running" || rnd() < (o.pollShare ?? 0.3),
      tokens: 30 + Math.floor(rnd() * 60),
    });
  }
  return jobs;
}

export function body(j: Planned, i: number): unknown {
  const markers = [
    `[fake:tokens:${j.kind === "extract" ? 20 : j.tokens}]`,
    "[fake:chunk_ms:40]",
    j.scenario === "server_error" ? "[fake:server_error]" : "",
    j.scenario === "bad_request" ? "[fake:bad_request]" : "",
  ].join(" ");
  if (j.kind === "extract")
    return {
      kind: "extract",
      input: {
        text: `Order ${i}: Ada from Lyon bought tea, a pot and two cups. ${markers}`,
        schema: EXTRACT_SCHEMA,
      },
    };
  return { kind: "document", input: { prompt: `Capacity job ${i}: a note on queues. ${markers}` } };
}
