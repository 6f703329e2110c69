-- quota-jobs: personal data is erased on time (retention) and on request (a user's erasure).
--
-- A prompt, an input, an output, a partial output and an error text are a user's personal data.
-- Until now nothing deleted them: a finished job kept its text forever, and deleting a user in
-- Supabase Auth removed only their user_plans row.
--
-- Retention: public.retention_batch erases the text of jobs finished before a cutoff, in bounded
-- batches walked on an index; the row stays, with everything accounting reads (user, kind, plan,
-- period, status, hold, captured, consumed, tokens, timestamps, reasons), so usage, quota_drift
-- and ops/reconcile.ts read the same numbers before and after. An erased row is marked by
-- erased_at and holds the empty values below (constraints say so).
--
-- Erasure: public.erase_user cancels the user's active jobs (cancel_job's rule, through
-- private.end_with_refund), adds what their jobs cost to an anonymous aggregate
-- (public.erased_usage: per period, plan, kind and meter, no user, no job), deletes their events,
-- jobs, counters and plan, then their auth.users row. Deleting the auth.users row any other way
-- (the dashboard, GoTrue's admin API) runs the same erasure from a trigger.
--
-- job_events is append-only and a final job never changes (two triggers). The one exception is
-- made here: while the transaction-local setting quota_jobs.erasing is on AND the statement runs
-- as the tables' owner (inside these security definer functions), the erasure may delete events
-- and the retention may blank a final job's text (and nothing else of it). The service role
-- setting the flag itself is still refused: it is not the owner.

-- the erased representation ------------------------------------------------------------------------
-- Why a marker column and empty values rather than nulls: prompt and input are `not null`, and
-- every reader (lib/view.ts, the page, list_jobs) types them as a string and an object. An erased
-- job keeps those types ('' and {}), and erased_at says why they are empty; a check ties the two,
-- so a half-erased row cannot exist. '' was refused by the prompt's length check: the check now
-- allows it on an erased row only.

alter table public.generation_jobs add column erased_at timestamptz;
comment on column public.generation_jobs.erased_at is
  'When retention erased the job''s text (prompt '''', input {}, output, partial output, error, '
  'idempotency key and prompt hash gone). Null: the text is still there. Only a finished job is '
  'erased; its accounting columns are untouched.';

alter table public.generation_jobs drop constraint generation_jobs_prompt_check;
alter table public.generation_jobs add constraint generation_jobs_prompt_check
  check (char_length(prompt) <= 8000 and (char_length(prompt) >= 1 or erased_at is not null))
  not valid;
alter table public.generation_jobs validate constraint generation_jobs_prompt_check;

alter table public.generation_jobs add constraint generation_jobs_erased_is_empty
  check (erased_at is null or (
    finished_at is not null and prompt = '' and input = '{}'::jsonb and output is null
    and partial_output is null and last_error is null and idempotency_key is null
    and request_hash = ''))
  not valid;
alter table public.generation_jobs validate constraint generation_jobs_erased_is_empty;

-- The retention walks this index oldest first: only finished rows whose text is still there are
-- in it, so each batch reads its rows and nothing it already erased.
create index generation_jobs_finished_unerased on public.generation_jobs (finished_at)
  where erased_at is null and finished_at is not null;

-- the anonymous aggregate ----------------------------------------------------------------------------

create table public.erased_usage (
  period_start timestamptz not null,
  plan_id text not null,
  kind text not null,
  meter text not null,
  jobs bigint not null default 0 check (jobs >= 0),
  captured bigint not null default 0 check (captured >= 0),
  consumed bigint not null default 0 check (consumed >= 0),
  prompt_tokens bigint not null default 0 check (prompt_tokens >= 0),
  completion_tokens bigint not null default 0 check (completion_tokens >= 0),
  updated_at timestamptz not null,
  primary key (period_start, plan_id, kind, meter)
);
alter table public.erased_usage enable row level security;
comment on table public.erased_usage is
  'What erased users'' jobs cost, without them: per quota period, plan, kind and meter, how many '
  'jobs, the units they captured, the tokens their non-final attempts consumed, and the tokens '
  'their attempts were billed (usage events; a running attempt canceled by the erasure: its '
  'prompt and last recorded progress). No user, no job id, no time finer than the period: it '
  'reconciles the provider''s bill, it cannot say whose usage it was. Written only by '
  'private.erase_user_data. No policy: the service role reads it.';

-- the exceptions to append-only and final ----------------------------------------------------------

create function private.erasing(p_table regclass) returns boolean
language sql stable
set search_path = ''
as $$
  select coalesce(current_setting('quota_jobs.erasing', true), '') = 'on'
    and exists (select from pg_catalog.pg_class c
                where c.oid = p_table and c.relowner = current_user::regrole::oid)
$$;
comment on function private.erasing(p_table regclass) is
  'Whether the current statement is an erasure: the transaction-local quota_jobs.erasing is on '
  'and it runs as the owner of p_table (inside private.erase_user_data or '
  'public.retention_batch, security definer). Anyone else setting the flag is still refused.';

create or replace function private.forbid_changing_events() returns trigger
language plpgsql
set search_path = ''
as $$
begin
  -- The erasure of a user deletes their events; nothing ever updates one.
  if tg_op = 'DELETE' and private.erasing('public.job_events'::regclass) then
    return old;
  end if;
  raise exception 'job_events is append-only' using errcode = 'P0001';
end
$$;
comment on function private.forbid_changing_events() is
  'Keeps job_events append-only; the one exception is a user''s erasure deleting their events '
  '(private.erasing).';

create or replace function private.forbid_changing_final_jobs() returns trigger
language plpgsql
set search_path = ''
as $$
declare
  -- What retention blanks; every other column must stay as it was.
  v_text text[] := array['prompt', 'input', 'output', 'partial_output', 'last_error',
    'idempotency_key', 'request_hash', 'erased_at'];
begin
  if old.status in ('succeeded', 'failed', 'canceled') then
    if old.erased_at is null and new.erased_at is not null
       and private.erasing('public.generation_jobs'::regclass)
       and (pg_catalog.to_jsonb(new) - v_text) = (pg_catalog.to_jsonb(old) - v_text) then
      return new;
    end if;
    raise exception 'job % is % and final', old.id, old.status using errcode = 'P0001';
  end if;
  return new;
end
$$;
comment on function private.forbid_changing_final_jobs() is
  'A final job never changes again: no second refund, no completion over a cancel, whatever the '
  'caller. The one exception is retention erasing its text, and nothing else (private.erasing).';

-- retention ------------------------------------------------------------------------------------------

create function public.retention_batch(p_before timestamptz, p_limit integer) returns integer
language plpgsql
security definer
set search_path = ''
as $$
declare
  v_n integer;
begin
  perform pg_catalog.set_config('quota_jobs.erasing', 'on', true);
  with picked as (
    select j.id from public.generation_jobs j
    where j.erased_at is null and j.finished_at is not null and j.finished_at < p_before
    order by j.finished_at
    limit least(greatest(coalesce(p_limit, 0), 0), 10000)
    for update skip locked
  )
  update public.generation_jobs j
  set prompt = '', input = '{}'::jsonb, output = null, partial_output = null, last_error = null,
      idempotency_key = null, request_hash = '', erased_at = pg_catalog.now()
  from picked p
  where j.id = p.id;
  get diagnostics v_n = row_count;
  perform pg_catalog.set_config('quota_jobs.erasing', 'off', true);
  return v_n;
end
$$;
comment on function public.retention_batch(p_before timestamptz, p_limit integer) is
  'Retention, one batch: erases the text (prompt, input, output, partial output, error, '
  'idempotency key, prompt hash) of at most p_limit (≤ 10000) jobs finished before p_before, '
  'oldest first, on the generation_jobs_finished_unerased index; rows another batch holds are '
  'skipped. Accounting columns and job_events (which hold no text) stay. Returns how many jobs '
  'it erased; fewer than p_limit means none is left. Security definer: the final-job trigger '
  'lets only the owner do this (private.erasing).';

-- erasure -------------------------------------------------------------------------------------------

create function private.erase_user_data(p_user_id uuid, p_now timestamptz) returns jsonb
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
  delete from public.generation_jobs j where j.user_id = p_user_id;
  get diagnostics v_jobs = row_count;
  perform pg_catalog.set_config('quota_jobs.erasing', 'off', true);
  -- Every job went with its hold or capture, so the counters go too (quota_drift stays empty).
  delete from public.quota_usage q where q.user_id = p_user_id;
  delete from public.user_plans p where p.user_id = p_user_id;

  return jsonb_build_object('outcome', 'erased', 'jobs', v_jobs, 'canceled', v_canceled,
    'events', v_events);
end
$$;
comment on function private.erase_user_data(p_user_id uuid, p_now timestamptz) is
  'A user''s erasure: cancels their active jobs (cancel_job''s refund rule), adds their jobs'' cost '
  'to public.erased_usage (no user), deletes their job_events, generation_jobs, quota_usage and '
  'user_plans rows. Serialized per user with enqueue (its advisory lock); a second call finds '
  'nothing and erases 0. Security definer: deleting events is allowed only to the owner '
  '(private.erasing).';

-- Enqueue asks whether the user exists before it takes the user's lock: an erasure committing in
-- between would let it create a job (and a counter) for a user that no longer is. The question now
-- takes that lock first and is asked after it, in a statement of its own (volatile: a fresh
-- snapshot), so it sees an erasure that committed while it waited. The lock is the one enqueue
-- takes next (advisory locks nest in a transaction), so enqueue waits no longer than before.
create or replace function private.user_exists(p_user_id uuid) returns boolean
language plpgsql volatile security definer set search_path = ''
as $$
begin
  perform pg_catalog.pg_advisory_xact_lock(
    pg_catalog.hashtextextended('quota_jobs.enqueue:' || p_user_id::text, 0));
  return exists (select from auth.users u where u.id = p_user_id);
end
$$;
comment on function private.user_exists(uuid) is
  'Whether Supabase Auth knows the user (an auth.users row). A valid token outlives its user. '
  'Takes the user''s enqueue lock first, so an erasure (which holds it) is seen once committed: '
  'enqueue cannot create a job for a user erased while it waited.';

create function public.erase_user(p_user_id uuid, p_now timestamptz default now()) returns jsonb
language plpgsql
security definer
set search_path = ''
as $$
declare
  v_result jsonb := private.erase_user_data(p_user_id, p_now);
  v_account boolean;
begin
  -- The account goes too: a valid token outlives it, but enqueue refuses a user without an
  -- auth.users row (user_not_found), so a replayed token cannot start a fresh quota. The
  -- trigger below runs the erasure again, which finds nothing.
  delete from auth.users u where u.id = p_user_id;
  v_account := found;
  return v_result || jsonb_build_object('account_deleted', v_account);
end
$$;
comment on function public.erase_user(p_user_id uuid, p_now timestamptz) is
  'DELETE /api/me: private.erase_user_data, then the user''s auth.users row (Supabase Auth''s '
  'own tables cascade from it). Idempotent: a second call erases 0 jobs, account_deleted false. '
  'Security definer: only the owner may delete from auth.users.';

create function private.erase_deleted_user() returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  perform private.erase_user_data(old.id, pg_catalog.now());
  return old;
end
$$;
comment on function private.erase_deleted_user() is
  'A user deleted in Supabase Auth (dashboard, admin API, public.erase_user) is erased as '
  'DELETE /api/me erases them, in the same transaction as the delete.';

create trigger erase_user_data before delete on auth.users
  for each row execute function private.erase_deleted_user();

-- export ------------------------------------------------------------------------------------------

create function public.export_user(
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
    'usage', coalesce((
      select jsonb_agg(to_jsonb(q) - 'user_id' order by q.period_start, q.meter)
      from public.quota_usage q where q.user_id = p_user_id
    ), '[]'::jsonb)
  ) end
$$;
comment on function public.export_user(p_user_id uuid, p_after_created_at timestamptz, p_after_id uuid, p_limit integer) is
  'GET /api/me/export, one page: the user''s jobs oldest first (every column but the prompt hash, '
  'each with its events), keyset-paginated on (created_at, id), at most 500 a page; the first '
  'page (no cursor) also carries their user_plans row and quota_usage rows.';

-- grants -------------------------------------------------------------------------------------------------
-- Default privileges (20261201000000_closed_by_default.sql) already close these to everyone but the
-- service role; said again here so the intent is in the file that makes them.

revoke all on table public.erased_usage from public, anon, authenticated;
grant select, insert, update, delete on table public.erased_usage to service_role;
revoke all on function private.erasing(regclass),
  public.retention_batch(timestamptz, integer),
  private.erase_user_data(uuid, timestamptz),
  public.erase_user(uuid, timestamptz),
  private.erase_deleted_user(),
  public.export_user(uuid, timestamptz, uuid, integer)
  from public, anon, authenticated;
grant execute on function private.erasing(regclass),
  public.retention_batch(timestamptz, integer),
  private.erase_user_data(uuid, timestamptz),
  public.erase_user(uuid, timestamptz),
  private.erase_deleted_user(),
  public.export_user(uuid, timestamptz, uuid, integer)
  to service_role;
