-- quota-jobs: a job's state is broadcast by a plain insert into realtime.messages, without the
-- subtransaction realtime.send opens for each one.
--
-- realtime.send wraps its insert in `begin ... exception when others`: a subtransaction, so a
-- transaction id of its own for every state (write transactions a job 3 → 6) and 21–31 % of a
-- job's throughput at 8 and 32 connections (docs/BENCHMARKS.md, section 2b). What it guards
-- against is an insert that can fail. For this trigger's insert (fixed columns, a payload that
-- is never null, a fresh uuid) the ways it can fail are three, each now checked before it:
--
--   * no partition for the row: realtime.messages is partitioned by day on inserted_at (now()
--     as the session's timestamp), and Realtime makes the partitions (messages_YYYY_MM_DD),
--     yesterday to three days ahead. The check names the partition the row's own inserted_at
--     goes to: localtimestamp is that same now(), in the same session time zone.
--   * row level security: a caller that does not bypass it needs an insert policy, and this
--     topic has none (only a read policy); row_security_active says whether it applies.
--   * no insert privilege on realtime.messages.
--
-- When any check fails the trigger calls realtime.send as before, which turns the refusal into
-- a warning: what a watcher hears and when is unchanged, and only an unusual caller pays the
-- subtransaction. The insert stays in the transition's transaction, so a state is still seen
-- only once it committed and never when it rolled back. Left to the insert without a guard, as
-- they are for every other write of the transition: running out of disk or memory, a lock
-- timeout the caller set, a cancel; and a uuid collision.
--
-- The payload is what realtime.send would send: {job_id, state, seq} with the message's id
-- added. realtime.send also sets realtime.topic for the rest of the transaction, which only an
-- insert policy reads: the direct insert needs none.

create or replace function private.broadcast_job_state() returns trigger
language plpgsql
set search_path to ''
as $$
declare
  v_payload jsonb := jsonb_build_object('job_id', new.job_id, 'state', new.to_status, 'seq', new.id);
  v_topic text := 'job:' || new.user_id::text;
  v_id uuid;
begin
  if to_regclass('realtime.messages_' || to_char(localtimestamp, 'YYYY_MM_DD')) is not null
     and not row_security_active('realtime.messages')
     and has_table_privilege('realtime.messages', 'insert') then
    v_id := gen_random_uuid();
    insert into realtime.messages (id, payload, event, topic, private, extension)
    values (v_id, v_payload || jsonb_build_object('id', v_id), 'job_state', v_topic, true,
      'broadcast');
  else
    perform realtime.send(v_payload, 'job_state', v_topic, true);
  end if;
  return null;
end
$$;
comment on function private.broadcast_job_state() is
  'Broadcasts {job_id, state, seq} on the private Realtime topic job:<user id> for a job_events row that changes the status, in the transition''s transaction: a plain insert into realtime.messages when today''s partition exists and the caller may insert without a policy, else realtime.send (which warns instead of failing).';
