/**
 * The daily partitions of `realtime.messages`, made as Realtime makes them when it connects to a
 * project and then from its janitor (`Tenants.create_messages_partitions`): yesterday to three
 * days ahead, UTC dates, owned by supabase_realtime_admin. Without today's, `realtime.send`
 * only warns and a private join fails with MissingPartition.
 */
import type pg from "pg";

const DAY = 86_400_000;
const isoDate = (t: number) => new Date(t).toISOString().slice(0, 10);

export async function ensureMessagePartitions(
  client: pg.ClientBase | pg.Pool,
  now: Date = new Date(),
): Promise<void> {
  const today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
  for (let day = -1; day <= 3; day++) {
    const from = isoDate(today + day * DAY);
    const name = `messages_${from.replaceAll("-", "_")}`;
    await client
      .query(
        `create table if not exists realtime.${name} partition of realtime.messages
           for values from ('${from}') to ('${isoDate(today + (day + 1) * DAY)}');
         alter table realtime.${name} owner to supabase_realtime_admin`,
      )
      .catch((err: { code?: string }) => {
        // Another process made it a moment ago (two stand-ins on one database).
        if (err.code !== "42P07" && err.code !== "23505") throw err;
      });
  }
}
