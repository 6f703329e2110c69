-- quota-jobs: a user's erasure covers every row that points at them, and log lines name a user
-- by a pseudonym the erasure makes meaningless.
--
-- public.superseded_callbacks (20261204020000_ops_metrics.sql) came after
-- private.erase_user_data and references generation_jobs with no `on delete`: once one of a
-- user's jobs had a superseded failure callback (normal after a requeue), deleting the job broke
-- that key (23503) and the erasure failed for good: DELETE /api/me answered 503 on every retry,
-- and so did deleting the user in Supabase Auth (the same function, from the trigger).
--
-- The row now keeps no job id once its job is erased (on delete set null): what it counts (a
-- superseded callback arrived at `at`, its message's seq and the job's) holds nothing about the
-- user, and the operator page's count of superseded callbacks stays what happened. The test
-- test/db/erasure-coverage.test.ts reads every foreign key to a table holding a user's rows from
-- pg_constraint and fails unless its list says how the erasure covers it.
--
-- Log pseudonyms: private.user_pseudonyms holds one random pseudonym per user, made on first
-- use by public.user_pseudonym; log lines name the user by it, never by their id. The erasure
-- deletes the row, so a pseudonym in a kept log line then names no one: nothing left (no key, no
-- salt, no row) links it to the user id.

-- superseded callbacks keep no job id once the job is erased --------------------------------------

alter table public.superseded_callbacks alter column job_id drop not null;
alter table public.superseded_callbacks drop constraint superseded_callbacks_job_id_fkey;
alter table public.superseded_callbacks add constraint superseded_callbacks_job_id_fkey
  foreign key (job_id) references public.generation_jobs (id) on delete set null;
comment on column public.superseded_callbacks.job_id is
  'The job whose old message''s callback was superseded; null once the job was erased with its '
  'user (private.erase_user_data): the row is kept, anonymous, for the operator page''s count.';

-- log pseudonyms ---------------------------------------------------------------------------------

create table private.user_pseudonyms (
  user_id uuid primary key references auth.users (id) on delete cascade,
  pseudonym text not null unique
    default 'u' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''),
  created_at timestamptz not null default pg_catalog.now()
);
alter table private.user_pseudonyms enable row level security;
comment on table private.user_pseudonyms is
  'The pseudonym log lines name a user by: random (a v4 UUID''s bits, not derived from the user '
  'id), made on first use by public.user_pseudonym. Erasure deletes the row (and the auth.users '
  'cascade would): a pseudonym in a log line kept after that links to no one. No policy.';

create function public.user_pseudonym(p_user_id uuid) returns jsonb
language plpgsql
security definer
set search_path = ''
as $$
declare
  v_pseudonym text;
begin
  select p.pseudonym into v_pseudonym from private.user_pseudonyms p where p.user_id = p_user_id;
  if found then
    return jsonb_build_object('outcome', 'pseudonym', 'pseudonym', v_pseudonym);
  end if;
  -- Only for a user Supabase Auth knows: an erased user (a token outliving them) gets none, so
  -- nothing about them is written again.
  insert into private.user_pseudonyms (user_id)
  select u.id from auth.users u where u.id = p_user_id
  on conflict (user_id) do nothing;
  select p.pseudonym into v_pseudonym from private.user_pseudonyms p where p.user_id = p_user_id;
  if not found then
    return jsonb_build_object('outcome', 'user_not_found');
  end if;
  return jsonb_build_object('outcome', 'pseudonym', 'pseudonym', v_pseudonym);
end
$$;
comment on function public.user_pseudonym(p_user_id uuid) is
  'The user''s log pseudonym (private.user_pseudonyms), made on first use; user_not_found for a '
  'user without an auth.users row (erased, or never created). Security definer: the table is '
  'private.';

-- the erasure --------------------------------------------------------------------------------------
-- As in 20261204010000_retention_erasure.sql, and the user's pseudonym goes too. Superseded
-- callbacks of the user's jobs lose their job id by the foreign key above (set null).

create or replace function private.erase_user_data(p_user_id uuid, p_now timestamptz) returns jsonb
language plpgsql
security definer
set search_path = ''
as $$
declare
  v_old public.generation_jobs;
  v_canceled integer := 0;
  v_jobs integer;
  v_events integer;
begin
  -- Enqueue takes this lock for the user: no job starts while their rows go.
  perform pg_catalog.pg_advisory_xact_lock(
    pg_catalog.hashtextextended('quota_jobs.enqueue:' || p_user_id::text, 0));
  -- Every job of the user, locked before any counter is touched: a worker's transition waits,
  -- then finds its job gone (not_found), and no lock order can cycle with it.
  perform from public.generation_jobs j where j.user_id = p_user_id order by j.id for update;

  -- Active jobs end as the user's own cancel ends them (refund rules included); the worker of a
  -- running one learns it at its next progress write and stops the model.
  for v_old in
    select * from public.generation_jobs j
    where j.user_id = p_user_id and j.status in ('queued', 'running') order by j.id
  loop
    perform private.end_with_refund(v_old, 'canceled', null, null, 'canceled', p_now,
      jsonb_build_object('by', 'erasure'), null, v_old.status = 'running');
    v_canceled := v_canceled + 1;
  end loop;

  -- What the provider billed for these jobs stays countable, without the user.
  insert into public.erased_usage as u (period_start, plan_id, kind, meter, jobs, captured,
    consumed, prompt_tokens, completion_tokens, updated_at)
  select t.period_start, t.plan_id, t.kind, t.meter, count(*), sum(t.captured), sum(t.consumed),
    sum(t.prompt_tokens), sum(t.completion_tokens), p_now
  from (
    select j.period_start, j.plan_id, j.kind, j.meter, j.captured, j.consumed,
      b.prompt_tokens + case when c.canceled then coalesce(j.prompt_tokens, 0) else 0 end
        as prompt_tokens,
      b.completion_tokens + case when c.canceled then j.partial_tokens else 0 end
        as completion_tokens
    from public.generation_jobs j
    -- Every attempt's usage as its transition (or record_attempt_usage) wrote it.
    cross join lateral (
      select
        coalesce(sum(greatest(coalesce((e.detail -> 'usage' ->> 'prompt_tokens')::bigint, 0), 0)), 0)
          as prompt_tokens,
        coalesce(sum(greatest(coalesce((e.detail -> 'usage' ->> 'completion_tokens')::bigint, 0), 0)), 0)
          as completion_tokens
      from public.job_events e where e.job_id = j.id and e.detail ? 'usage'
    ) b
    -- A running attempt this erasure canceled reported no usage: counted as the cancel charged it
    -- (its prompt and last recorded progress).
    cross join lateral (
      select exists (select from public.job_events x
        where x.job_id = j.id and x.event = 'canceled' and x.from_status = 'running'
          and x.detail ->> 'by' = 'erasure') as canceled
    ) c
    where j.user_id = p_user_id
  ) t
  group by t.period_start, t.plan_id, t.kind, t.meter
  on conflict (period_start, plan_id, kind, meter) do update
    set jobs = u.jobs + excluded.jobs,
        captured = u.captured + excluded.captured,
        consumed = u.consumed + excluded.consumed,
        prompt_tokens = u.prompt_tokens + excluded.prompt_tokens,
        completion_tokens = u.completion_tokens + excluded.completion_tokens,
        updated_at = p_now;

  perform pg_catalog.set_config('quota_jobs.erasing', 'on', true);
  delete from public.job_events e where e.user_id = p_user_id;
  get diagnostics v_events = row_count;
  -- Their superseded callbacks keep their rows, without the job id (on delete set null).
  delete from public.generation_jobs j where j.user_id = p_user_id;
  get diagnostics v_jobs = row_count;
  perform pg_catalog.set_config('quota_jobs.erasing', 'off', true);
  -- Every job went with its hold or capture, so the counters go too (quota_drift stays empty).
  delete from public.quota_usage q where q.user_id = p_user_id;
  delete from public.user_plans p where p.user_id = p_user_id;
  -- A pseudonym in a kept log line now names no one.
  delete from private.user_pseudonyms s where s.user_id = p_user_id;

  return jsonb_build_object('outcome', 'erased', 'jobs', v_jobs, 'canceled', v_canceled,
    'events', v_events);
end
$$;
comment on function private.erase_user_data(p_user_id uuid, p_now timestamptz) is
  'A user''s erasure: cancels their active jobs (cancel_job''s refund rule), adds their jobs'' cost '
  'to public.erased_usage (no user), deletes their job_events, generation_jobs (their '
  'superseded_callbacks rows keep no job id), quota_usage, user_plans and user_pseudonyms rows. '
  'Serialized per user with enqueue (its advisory lock); a second call finds nothing and erases '
  '0. Security definer: deleting events is allowed only to the owner (private.erasing).';

-- the export --------------------------------------------------------------------------------------
-- As in 20261204010000_retention_erasure.sql; the first page also carries the user's log
-- pseudonym: it is stored about them, and with it they can ask for the lines that name them.

create or replace function public.export_user(
  p_user_id uuid,
  p_after_created_at timestamptz default null,
  p_after_id uuid default null,
  p_limit integer default 100
) returns jsonb
language sql
stable
set search_path = ''
as $$
  with lim as (
    select least(greatest(coalesce(p_limit, 100), 1), 500) as n
  ), page as (
    select j from public.generation_jobs j
    where j.user_id = p_user_id
      and (p_after_created_at is null or (j.created_at, j.id) > (p_after_created_at, p_after_id))
    order by j.created_at, j.id
    limit (select n + 1 from lim)
  ), shown as (
    select p.j from page p order by (p.j).created_at, (p.j).id limit (select n from lim)
  )
  select jsonb_build_object(
    'outcome', 'exported',
    'jobs', coalesce((
      select jsonb_agg(private.job_json(s.j) || jsonb_build_object('events', coalesce((
        select jsonb_agg(to_jsonb(e) - 'user_id' - 'job_id' order by e.at, e.id)
        from public.job_events e where e.job_id = (s.j).id and e.user_id = p_user_id
      ), '[]'::jsonb)) order by (s.j).created_at, (s.j).id)
      from shown s
    ), '[]'::jsonb),
    'has_more', (select count(*) from page) > (select n from lim)
  ) || case when p_after_created_at is not null then '{}'::jsonb else jsonb_build_object(
    'plan', (select to_jsonb(up) - 'user_id' from public.user_plans up where up.user_id = p_user_id),
    'log_pseudonym', (select s.pseudonym from private.user_pseudonyms s where s.user_id = p_user_id),
    'usage', coalesce((
      select jsonb_agg(to_jsonb(q) - 'user_id' order by q.period_start, q.meter)
      from public.quota_usage q where q.user_id = p_user_id
    ), '[]'::jsonb)
  ) end
$$;
comment on function public.export_user(p_user_id uuid, p_after_created_at timestamptz, p_after_id uuid, p_limit integer) is
  'GET /api/me/export, one page: the user''s jobs oldest first (every column but the prompt hash, '
  'each with its events), keyset-paginated on (created_at, id), at most 500 a page; the first '
  'page (no cursor) also carries their user_plans row, quota_usage rows and log pseudonym (null '
  'when no log line named them yet).';

-- grants -------------------------------------------------------------------------------------------------
-- Default privileges (20261201000000_closed_by_default.sql) already close these to everyone but the
-- service role; said again here so the intent is in the file that makes them.

revoke all on table private.user_pseudonyms from public, anon, authenticated;
revoke all on function public.user_pseudonym(uuid) from public, anon, authenticated;
grant execute on function public.user_pseudonym(uuid) to service_role;
