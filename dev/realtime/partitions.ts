/**
 * The daily partitions of `realtime.messages`, kept as Realtime keeps them from its janitor
 * (`Tenants.create_messages_partitions`, `Messages.delete_old_messages`): yesterday to three
 * days ahead made (UTC dates, owned by supabase_realtime_admin), and a day older than 72 hours
 * dropped whole, so broadcasts (a job's state names its user's id in the topic) are not kept.
 * Without today's partition `realtime.send` only warns and a private join fails with
 * MissingPartition.
 */
import type pg from "pg";

const DAY = 86_400_000;
const isoDate = (t: number) => new Date(t).toISOString().slice(0, 10);

export async function maintainMessagePartitions(
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
  const limit = isoDate(now.getTime() - 3 * DAY).replaceAll("-", "_");
  const { rows } = await client.query<{ name: string }>(
    `select c.relname as name from pg_inherits i
       join pg_class c on c.oid = i.inhrelid join pg_namespace n on n.oid = c.relnamespace
      where i.inhparent = 'realtime.messages'::regclass and n.nspname = 'realtime'
        and c.relname ~ '^messages_[0-9]{4}_[0-9]{2}_[0-9]{2}$' and c.relname < $1`,
    [`messages_${limit}`],
  );
  for (const { name } of rows) await client.query(`drop table if exists realtime.${name}`);
}
