-- quota-jobs: a job's state changes are pushed to its watchers over Supabase Realtime.
--
-- Every watcher polled GET /api/jobs/<id> once a second. Now each transition that changes a
-- job's status also calls realtime.send in its own transaction: Realtime reads realtime.messages
-- by logical replication, so a watcher hears a state only once its transition committed, in
-- commit order, and never one that rolled back. realtime.send never fails its caller (it turns
-- any error into a warning), so a transition cannot fail for broadcasting.
--
-- The broadcast is {job_id, state, seq} on the private topic job:<user id>, event job_state.
-- seq is the transition's job_events id: a job's transitions are serialized by its row lock, so
-- its seq only grows; a watcher keeps the highest seq it has seen and reads the job once after a
-- reconnect. One topic per user, not per job: a page watches all of its user's jobs on one
-- channel, and the read policy below is a comparison with the token's sub, with no table to
-- look up at each join.

create function private.broadcast_job_state() returns trigger
language plpgsql
set search_path to ''
as $$
begin
  perform realtime.send(
    jsonb_build_object('job_id', new.job_id, 'state', new.to_status, 'seq', new.id),
    'job_state',
    'job:' || new.user_id::text,
    true
  );
  return null;
end
$$;
comment on function private.broadcast_job_state() is
  'Broadcasts {job_id, state, seq} on the private Realtime topic job:<user id> for a job_events row that changes the status, in the transition''s transaction.';

create trigger job_events_broadcast_state after insert on public.job_events
  for each row when (new.from_status is distinct from new.to_status)
  execute function private.broadcast_job_state();

-- Who may join job:<user id>: that user only. No insert policy: a client never broadcasts on it,
-- only the transitions do.
create policy "a user hears their own jobs' states" on realtime.messages
  for select to authenticated
  using (extension = 'broadcast' and realtime.topic() = 'job:' || (select auth.uid())::text);
