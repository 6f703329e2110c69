-- quota-jobs: what the operator page (/ops, GET /api/ops/metrics) charts, read by SQL functions
-- the service role alone may execute, bucketed here with date_bin and walked by time indexes,
-- so a window reads its own rows and never the whole table.
--
-- Where each fact lives:
--   jobs enqueued, tokens held           generation_jobs by created_at (hold on a token plan)
--   succeeded, failed by reason,         generation_jobs by finished_at (status, failure_reason,
--   canceled, refunded, withheld,        refunded_at, refund_withheld, captured on a token plan);
--   captures, failure callbacks          a failure callback that failed a job is delivery_failed
--   superseded failure callbacks         superseded_callbacks (new, below) by at
--   provider tokens consumed             job_events.detail.usage by at (each attempt's usage)
--   provider 429s, gate closed time      job_events requeued / gave_up with detail.quota_hit (new)
--   queue latency (enqueue → 1st claim)  job_events 'started' of attempt 1 by at, minus created_at
--   run time                             succeeded jobs by finished_at: finished_at − started_at
--
-- Two facts were not recorded anywhere durable, and now are, minimally:
--   * A provider 429 and a requeue behind the closed gate both wrote the same `requeued` event.
--     requeue_job now says which in its events: `quota_hit` (true for a 429 the job counted: a
--     rate limit or insufficient_quota; false behind the closed gate or for no flex capacity),
--     and a give-up also carries `resume_at`, the time the worker closed the gate until. The
--     gate itself is one Redis key that expires (lib/provider-gate.ts); the worker closes it
--     until that same resume time before it calls requeue_job, so the union of [at, resume_at]
--     over quota_hit events is the time the gate was closed (a Redis error that left the gate
--     open is counted as closed: the job waited all the same).
--   * A superseded failure callback changes nothing and, by design, writes no job event (the
--     job's history stays transitions and usage). It now leaves one row in
--     public.superseded_callbacks, so on-call sees how often old messages' callbacks arrive.
--
-- The other engineer's partitioning of job_events by month on `at` keeps these queries: each
-- filters on `at` by a range, so only the window's partitions are read.

-- the indexes the windows walk ---------------------------------------------------------------

create index job_events_at on public.job_events (at);
create index generation_jobs_created on public.generation_jobs (created_at);
create index generation_jobs_finished on public.generation_jobs (finished_at)
  where finished_at is not null;

-- superseded failure callbacks ---------------------------------------------------------------

create table public.superseded_callbacks (
  id bigint generated always as identity primary key,
  job_id uuid not null references public.generation_jobs (id),
  at timestamptz not null,
  message_seq integer not null,
  job_seq integer not null
);
alter table public.superseded_callbacks enable row level security;
create index superseded_callbacks_at on public.superseded_callbacks (at);
comment on table public.superseded_callbacks is 'One row per failure callback that fail_job answered superseded (the failed message was older than the job''s current one): nothing changed, no refund. Read by the operator page; no user reads it (RLS on, no policy).';

create or replace function public.requeue_job(p_job_id uuid, p_attempt integer, p_resume_at timestamp with time zone, p_error text DEFAULT NULL::text, p_max_hits integer DEFAULT 3, p_max_age_seconds integer DEFAULT 10800, p_now timestamp with time zone DEFAULT now(), p_count_hit boolean DEFAULT true, p_usage jsonb DEFAULT NULL::jsonb, p_capacity boolean DEFAULT false)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $$
declare
  v_old public.generation_jobs;
  v_job public.generation_jobs;
  v_hits integer;
  v_deadline timestamptz;
  v_give_up text;
  v_result jsonb;
begin
  select * into v_old from public.generation_jobs j where j.id = p_job_id for update;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  if v_old.status <> 'running' or v_old.attempts <> p_attempt then
    return jsonb_build_object('outcome', 'not_running', 'job', private.job_json(v_old));
  end if;

  -- No flex capacity is not a quota: it never counts a hit, whatever the caller says.
  v_hits := v_old.provider_quota_hits
    + case when p_count_hit and not p_capacity then 1 else 0 end;
  v_deadline := v_old.created_at + make_interval(secs => p_max_age_seconds);
  v_give_up := case
    when p_count_hit and not p_capacity and v_hits >= p_max_hits then 'hits'
    when p_now >= v_deadline then 'age'
    when p_resume_at > v_deadline then 'age'
  end;

  if v_give_up is not null then
    update public.generation_jobs j set provider_quota_hits = v_hits where j.id = p_job_id
    returning * into v_old;
    v_job := private.end_with_refund(
      v_old, 'failed',
      case when p_capacity then 'capacity_unavailable' else 'provider_quota_exhausted' end,
      p_error, 'gave_up', p_now,
      private.with_usage(
        jsonb_build_object('attempt', p_attempt, 'hits', v_hits, 'by', v_give_up,
          'quota_hit', p_count_hit and not p_capacity, 'resume_at', p_resume_at), p_usage
      ),
      private.usage_tokens(p_usage)
    );
    return jsonb_build_object('outcome', 'gave_up', 'by', v_give_up, 'job', private.job_json(v_job));
  end if;

  with requeued as (
    update public.generation_jobs j
    set status = 'queued',
        provider_quota_hits = v_hits,
        resume_at = greatest(p_resume_at, p_now),
        waiting_for = case when p_capacity then 'capacity' else 'provider' end,
        capacity_wait_since = case when p_capacity then coalesce(j.capacity_wait_since, p_now)
          else j.capacity_wait_since end,
        queued_at = p_now,
        lease_expires_at = null,
        partial_output = null,
        publish_seq = j.publish_seq + 1,
        last_error = coalesce(p_error, j.last_error),
        updated_at = p_now
    where j.id = p_job_id
    returning j.*
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select r.id, r.user_id, p_now, 'requeued', 'running', r.status,
      private.with_usage(
        jsonb_build_object('attempt', p_attempt, 'hits', v_hits, 'resume_at', r.resume_at,
          'waiting_for', r.waiting_for, 'quota_hit', p_count_hit and not p_capacity), p_usage
      )
    from requeued r
  )
  select jsonb_build_object('outcome', 'requeued', 'job', to_jsonb(r) - 'request_hash') into v_result
  from requeued r;
  return v_result;
end
$$;
comment on function public.requeue_job(p_job_id uuid, p_attempt integer, p_resume_at timestamp with time zone, p_error text, p_max_hits integer, p_max_age_seconds integer, p_now timestamp with time zone, p_count_hit boolean, p_usage jsonb, p_capacity boolean) is 'running under this claim → queued until p_resume_at after a provider quota hit (counted), a closed provider gate (p_count_hit false) or no flex capacity (p_capacity: never counted, waiting_for capacity), or failed when it gives up (hits or age; provider_quota_exhausted, or capacity_unavailable for a capacity wait; private.end_with_refund''s rule); the attempt''s usage goes in the event, and quota_hit says whether it was a counted provider 429 (the operator page''s 429s and gate time).';

create or replace function public.fail_job(p_job_id uuid, p_reason text, p_error text DEFAULT NULL::text, p_attempt integer DEFAULT NULL::integer, p_now timestamp with time zone DEFAULT now(), p_usage jsonb DEFAULT NULL::jsonb, p_seq integer DEFAULT NULL::integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $$
declare
  v_old public.generation_jobs;
begin
  select * into v_old from public.generation_jobs j where j.id = p_job_id for update;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  if v_old.status in ('succeeded', 'failed', 'canceled') then
    return jsonb_build_object('outcome', 'already_final', 'job', private.job_json(v_old));
  end if;
  if p_seq is not null and p_seq < v_old.publish_seq then
    insert into public.superseded_callbacks (job_id, at, message_seq, job_seq)
    values (v_old.id, p_now, p_seq, v_old.publish_seq);
    return jsonb_build_object('outcome', 'superseded', 'job', private.job_json(v_old));
  end if;
  if p_attempt is not null and (v_old.status <> 'running' or v_old.attempts <> p_attempt) then
    return jsonb_build_object('outcome', 'not_running', 'job', private.job_json(v_old));
  end if;
  return jsonb_build_object('outcome', 'failed', 'job', private.job_json(private.end_with_refund(
    v_old, 'failed', p_reason, p_error, 'failed', p_now,
    private.with_usage(jsonb_build_object('attempt', p_attempt, 'reason', p_reason), p_usage),
    case when p_usage is null then null else private.usage_tokens(p_usage) end
  )));
end
$$;
comment on function public.fail_job(p_job_id uuid, p_reason text, p_error text, p_attempt integer, p_now timestamp with time zone, p_usage jsonb, p_seq integer) is 'queued or running (with p_attempt: only that claim) → failed (private.end_with_refund''s rule: a token plan captures what was consumed; a job plan''s refund after spend is bounded; provider_misconfigured captures 0, unbounded). With p_seq older than the job''s publish_seq: superseded, nothing changes but a row in superseded_callbacks.';

-- the buckets --------------------------------------------------------------------------------

create function private.ops_buckets(p_from timestamptz, p_to timestamptz, p_bucket interval)
returns table (bucket timestamptz)
language plpgsql
immutable
set search_path = ''
as $$
begin
  -- Bounded: a caller cannot ask for a million buckets (or none, or a negative step).
  if p_bucket is null or p_bucket <= interval '0' or p_from is null or p_to is null
    or p_to <= p_from
    or extract(epoch from p_to - p_from) / extract(epoch from p_bucket) > 1000 then
    raise exception 'ops: bad window % to % by %', p_from, p_to, p_bucket using errcode = '22023';
  end if;
  return query select g from pg_catalog.generate_series(p_from, p_to - interval '1 microsecond', p_bucket) g;
end
$$;
comment on function private.ops_buckets(p_from timestamptz, p_to timestamptz, p_bucket interval) is 'The buckets of an operator-page window: p_from, p_from + p_bucket, … before p_to (at most 1000; else 22023). Every series has a row per bucket, zeros included.';

-- jobs: enqueued, endings, refunds, holds and captures, failure callbacks ----------------------

create function public.ops_job_series(p_from timestamptz, p_to timestamptz, p_bucket interval)
returns table (
  bucket timestamptz,
  enqueued bigint,
  succeeded bigint,
  failed bigint,
  canceled bigint,
  refunded bigint,
  withheld bigint,
  tokens_held bigint,
  tokens_captured bigint,
  failure_callbacks bigint,
  superseded_callbacks bigint
)
language sql
stable
set search_path = ''
as $$
  with b as (select o.bucket from private.ops_buckets(p_from, p_to, p_bucket) o),
  created as (
    select pg_catalog.date_bin(p_bucket, j.created_at, p_from) as bucket,
      count(*) as enqueued,
      coalesce(sum(j.hold) filter (where j.meter = 'tokens'), 0) as tokens_held
    from public.generation_jobs j
    where j.created_at >= p_from and j.created_at < p_to
    group by 1
  ),
  ended as (
    select pg_catalog.date_bin(p_bucket, j.finished_at, p_from) as bucket,
      count(*) filter (where j.status = 'succeeded') as succeeded,
      count(*) filter (where j.status = 'failed') as failed,
      count(*) filter (where j.status = 'canceled') as canceled,
      count(*) filter (where j.refunded_at is not null) as refunded,
      count(*) filter (where j.refund_withheld is not null) as withheld,
      coalesce(sum(j.captured) filter (where j.meter = 'tokens'), 0) as tokens_captured,
      count(*) filter (where j.failure_reason = 'delivery_failed') as failure_callbacks
    from public.generation_jobs j
    where j.finished_at >= p_from and j.finished_at < p_to
    group by 1
  ),
  superseded as (
    select pg_catalog.date_bin(p_bucket, s.at, p_from) as bucket, count(*) as n
    from public.superseded_callbacks s
    where s.at >= p_from and s.at < p_to
    group by 1
  )
  select b.bucket,
    coalesce(c.enqueued, 0), coalesce(e.succeeded, 0), coalesce(e.failed, 0),
    coalesce(e.canceled, 0), coalesce(e.refunded, 0), coalesce(e.withheld, 0),
    coalesce(c.tokens_held, 0)::bigint, coalesce(e.tokens_captured, 0)::bigint,
    coalesce(e.failure_callbacks, 0), coalesce(s.n, 0)
  from b
  left join created c on c.bucket = b.bucket
  left join ended e on e.bucket = b.bucket
  left join superseded s on s.bucket = b.bucket
  order by b.bucket
$$;
comment on function public.ops_job_series(p_from timestamptz, p_to timestamptz, p_bucket interval) is 'Operator page: per bucket of [p_from, p_to), jobs enqueued (and the tokens a token plan held), jobs ended succeeded / failed / canceled, refunded or withheld, tokens a token plan captured, failure callbacks that failed a job (delivery_failed) and superseded ones. Walks generation_jobs_created, generation_jobs_finished and superseded_callbacks_at.';

create function public.ops_failure_reasons(p_from timestamptz, p_to timestamptz, p_bucket interval)
returns table (bucket timestamptz, reason text, jobs bigint)
language sql
stable
set search_path = ''
as $$
  select pg_catalog.date_bin(p_bucket, j.finished_at, p_from), j.failure_reason, count(*)
  from public.generation_jobs j
  where j.finished_at >= p_from and j.finished_at < p_to and j.status = 'failed'
    and exists (select from private.ops_buckets(p_from, p_to, p_bucket))
  group by 1, 2
  order by 1, 2
$$;
comment on function public.ops_failure_reasons(p_from timestamptz, p_to timestamptz, p_bucket interval) is 'Operator page: failed jobs per bucket and failure reason (only the buckets and reasons that had some). Walks generation_jobs_finished.';

-- the provider: tokens consumed, 429s, the gate closed ----------------------------------------

create function public.ops_provider_series(p_from timestamptz, p_to timestamptz, p_bucket interval)
returns table (bucket timestamptz, provider_tokens bigint, quota_429s bigint, gate_closed_seconds double precision)
language sql
stable
set search_path = ''
as $$
  with b as (select o.bucket from private.ops_buckets(p_from, p_to, p_bucket) o),
  events as (
    select pg_catalog.date_bin(p_bucket, e.at, p_from) as bucket,
      coalesce(sum(
        coalesce((e.detail -> 'usage' ->> 'prompt_tokens')::bigint, 0)
        + coalesce((e.detail -> 'usage' ->> 'completion_tokens')::bigint, 0)
      ) filter (where e.detail ? 'usage'), 0) as provider_tokens,
      count(*) filter (where e.event in ('requeued', 'gave_up')
        and e.detail ->> 'quota_hit' = 'true') as quota_429s
    from public.job_events e
    where e.at >= p_from and e.at < p_to
    group by 1
  ),
  -- A closure that began up to an hour before the window may still hold at its start.
  closures as (
    select e.at as s, (e.detail ->> 'resume_at')::timestamptz as t
    from public.job_events e
    where e.at >= p_from - interval '1 hour' and e.at < p_to
      and e.event in ('requeued', 'gave_up') and e.detail ->> 'quota_hit' = 'true'
      and e.detail ? 'resume_at'
  ),
  -- Overlapping closures (many workers hear the same 429s) merge into islands.
  marked as (
    select c.s, c.t,
      case when c.s <= max(c.t) over (order by c.s, c.t rows between unbounded preceding and 1 preceding)
        then 0 else 1 end as starts
    from closures c where c.t > c.s
  ),
  grouped as (
    select m.s, m.t, sum(m.starts) over (order by m.s, m.t) as island from marked m
  ),
  islands as (
    select min(g.s) as s, least(max(g.t), p_to) as t from grouped g group by g.island
  ),
  gate as (
    select b.bucket, sum(extract(epoch from
      least(i.t, b.bucket + p_bucket) - greatest(i.s, b.bucket)))::double precision as seconds
    from b join islands i on i.s < b.bucket + p_bucket and i.t > b.bucket
    group by b.bucket
  )
  select b.bucket, coalesce(e.provider_tokens, 0)::bigint, coalesce(e.quota_429s, 0),
    coalesce(g.seconds, 0)
  from b
  left join events e on e.bucket = b.bucket
  left join gate g on g.bucket = b.bucket
  order by b.bucket
$$;
comment on function public.ops_provider_series(p_from timestamptz, p_to timestamptz, p_bucket interval) is 'Operator page: per bucket, provider tokens consumed (every attempt''s usage in job_events), provider 429s the jobs counted (requeued / gave_up with quota_hit), and seconds the shared provider gate was closed (the union of [at, resume_at] of those events, clipped to p_to). Walks job_events_at.';

-- latency: enqueue → first claim, and run time ------------------------------------------------

create function public.ops_latency_series(p_from timestamptz, p_to timestamptz, p_bucket interval)
returns table (bucket timestamptz, metric text, jobs bigint, p50 double precision, p90 double precision, p99 double precision)
language sql
stable
set search_path = ''
as $$
  with first_claims as (
    select pg_catalog.date_bin(p_bucket, e.at, p_from) as bucket,
      extract(epoch from e.at - j.created_at)::double precision as seconds
    from public.job_events e
    join public.generation_jobs j on j.id = e.job_id
    where e.at >= p_from and e.at < p_to and e.event = 'started' and e.detail ->> 'attempt' = '1'
  ),
  runs as (
    select pg_catalog.date_bin(p_bucket, j.finished_at, p_from) as bucket,
      extract(epoch from j.finished_at - j.started_at)::double precision as seconds
    from public.generation_jobs j
    where j.finished_at >= p_from and j.finished_at < p_to and j.status = 'succeeded'
  ),
  both_ as (
    select 'queue_latency' as metric, f.bucket, f.seconds from first_claims f
    union all
    select 'run_time', r.bucket, r.seconds from runs r
  )
  select x.bucket, x.metric, count(*),
    percentile_cont(0.5) within group (order by x.seconds),
    percentile_cont(0.9) within group (order by x.seconds),
    percentile_cont(0.99) within group (order by x.seconds)
  from both_ x
  where exists (select from private.ops_buckets(p_from, p_to, p_bucket))
  group by x.bucket, x.metric
  order by x.bucket, x.metric
$$;
comment on function public.ops_latency_series(p_from timestamptz, p_to timestamptz, p_bucket interval) is 'Operator page: per bucket (only those with some), p50/p90/p99 seconds of queue_latency (a job''s first claim, event started of attempt 1, minus its created_at) and run_time (a succeeded job''s finished_at minus its last claim''s started_at). Walks job_events_at and generation_jobs_finished.';

-- now: stuck jobs and drift ------------------------------------------------------------------

create function public.ops_now(
  p_now timestamptz default now(),
  p_lease_grace_seconds integer default 300,
  p_undelivered_after_seconds integer default 900,
  p_max_age_seconds integer default 10800
) returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'at', p_now,
    'stuck', jsonb_build_object(
      'running_lease_expired', (select count(*) from public.generation_jobs j
        where private.stale_lease_expired(j, p_now, p_lease_grace_seconds)),
      'active_past_max_age', (select count(*) from public.generation_jobs j
        where private.stale_past_max_age(j, p_now, p_max_age_seconds)),
      'queued_never_delivered', (select count(*) from public.generation_jobs j
        where private.stale_undelivered(j, p_now, p_undelivered_after_seconds))),
    'drift_rows', (select count(*) from public.quota_drift))
$$;
comment on function public.ops_now(p_now timestamptz, p_lease_grace_seconds integer, p_undelivered_after_seconds integer, p_max_age_seconds integer) is 'Operator page''s "now" tiles: active jobs stale by each of the sweeper''s three rules (the same predicates and partial indexes as sweep_jobs and reconcile) and the rows of quota_drift (always 0; the one full aggregate on the page, as reconcile''s).';

-- one round trip for the page -----------------------------------------------------------------

create function public.ops_metrics(
  p_from timestamptz,
  p_to timestamptz,
  p_bucket interval,
  p_now timestamptz default now(),
  p_lease_grace_seconds integer default 300,
  p_undelivered_after_seconds integer default 900,
  p_max_age_seconds integer default 10800
) returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'outcome', 'metrics',
    'jobs', (select coalesce(jsonb_agg(to_jsonb(s) order by s.bucket), '[]'::jsonb)
      from public.ops_job_series(p_from, p_to, p_bucket) s),
    'failure_reasons', (select coalesce(jsonb_agg(to_jsonb(f) order by f.bucket, f.reason), '[]'::jsonb)
      from public.ops_failure_reasons(p_from, p_to, p_bucket) f),
    'provider', (select coalesce(jsonb_agg(to_jsonb(p) order by p.bucket), '[]'::jsonb)
      from public.ops_provider_series(p_from, p_to, p_bucket) p),
    'latency', (select coalesce(jsonb_agg(to_jsonb(l) order by l.bucket, l.metric), '[]'::jsonb)
      from public.ops_latency_series(p_from, p_to, p_bucket) l),
    'now', public.ops_now(p_now, p_lease_grace_seconds, p_undelivered_after_seconds, p_max_age_seconds))
$$;
comment on function public.ops_metrics(p_from timestamptz, p_to timestamptz, p_bucket interval, p_now timestamptz, p_lease_grace_seconds integer, p_undelivered_after_seconds integer, p_max_age_seconds integer) is 'Operator page (GET /api/ops/metrics): every series of [p_from, p_to) by p_bucket and the now tiles, as one jsonb (outcome metrics), in one round trip.';

-- grants: the service role only --------------------------------------------------------------

revoke all on function private.ops_buckets(timestamptz, timestamptz, interval) from public, anon, authenticated;
revoke all on function public.ops_job_series(timestamptz, timestamptz, interval) from public, anon, authenticated;
revoke all on function public.ops_failure_reasons(timestamptz, timestamptz, interval) from public, anon, authenticated;
revoke all on function public.ops_provider_series(timestamptz, timestamptz, interval) from public, anon, authenticated;
revoke all on function public.ops_latency_series(timestamptz, timestamptz, interval) from public, anon, authenticated;
revoke all on function public.ops_now(timestamptz, integer, integer, integer) from public, anon, authenticated;
revoke all on function public.ops_metrics(timestamptz, timestamptz, interval, timestamptz, integer, integer, integer) from public, anon, authenticated;
revoke all on table public.superseded_callbacks from anon, authenticated;
grant execute on function private.ops_buckets(timestamptz, timestamptz, interval) to service_role;
grant execute on function public.ops_job_series(timestamptz, timestamptz, interval) to service_role;
grant execute on function public.ops_failure_reasons(timestamptz, timestamptz, interval) to service_role;
grant execute on function public.ops_provider_series(timestamptz, timestamptz, interval) to service_role;
grant execute on function public.ops_latency_series(timestamptz, timestamptz, interval) to service_role;
grant execute on function public.ops_now(timestamptz, integer, integer, integer) to service_role;
grant execute on function public.ops_metrics(timestamptz, timestamptz, interval, timestamptz, integer, integer, integer) to service_role;
