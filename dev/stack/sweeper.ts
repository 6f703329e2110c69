/** The sweeper as Vercel cron runs it: GET /api/cron/sweep with the CRON_SECRET. */
import type { Teardown } from "./teardown.ts";

export type Sweep = () => Promise<{ status: number; body: unknown }>;

export function sweeper(appUrl: string, cronSecret: string | undefined): Sweep {
  return async () => {
    const res = await fetch(`${appUrl}/api/cron/sweep`, {
      headers: { authorization: `Bearer ${cronSecret}` },
    });
    const text = await res.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // keep the text
    }
    return { status: res.status, body };
  };
}

/** Sweeps every `seconds` (dev only), logging only sweeps that failed or acted. */
export function sweepEvery(
  seconds: number,
  sweep: Sweep,
  log: (line: string) => void,
  teardown: Teardown,
): void {
  const timer = setInterval(() => {
    sweep().then(
      (r) => {
        const b = r.body as { failed?: Record<string, number>; republished?: number };
        const acted = Object.keys(b?.failed ?? {}).length > 0 || (b?.republished ?? 0) > 0;
        if (r.status !== 200 || acted) log(`[sweeper] ${r.status} ${JSON.stringify(r.body)}`);
      },
      (error: unknown) => log(`[sweeper] failed: ${(error as Error).message}`),
    );
  }, seconds * 1000);
  timer.unref();
  teardown.add(async () => clearInterval(timer));
}
