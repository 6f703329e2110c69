-- quota-jobs: a progress write adds only the text that arrived since the last one.
--
-- record_progress wrote the attempt's whole text so far into generation_jobs.partial_output
-- about once a second, so a job streaming T seconds wrote about T × (its answer so far) bytes of
-- row, TOAST and WAL: quadratic in the answer (an 8,000-token answer, 200 writes of 160
-- characters each, wrote ~3.3 MB of text for a 32 kB answer). The text now goes to an
-- append-only table, one row per write that brought new text, and the job row keeps only the
-- counters it had (partial_tokens, progress_at, ...): a write costs the same whatever the length
-- of the answer before it.
--
-- - public.job_output_chunks (job_id, attempt, end_char, text): end_char is the attempt's text
--   length, in characters, once the chunk is appended (primary key with job and attempt: the
--   chunks in order, and the stored length is the last key).
-- - record_progress takes the new text and its offset (p_text, p_offset: the characters of the
--   attempt's text before it, as the caller believes them stored) instead of the whole text. It
--   stores only what lies beyond what is stored, so a retried or duplicated write adds nothing
--   twice, and answers how many characters are stored (`stored`), from which the caller sends
--   next. A write whose offset is past what is stored (a gap: the text before it never arrived)
--   stores no text and says where the text ends. The guard is the one it had, in the same
--   statement: only the running claim writes; the outcomes are the ones it had.
-- - The partial answer is read as it was: private.job_json (what get_job, list_jobs, export_user
--   and the transitions return) puts the chunks of the job's current attempt under
--   `partial_output` for a running, failed or canceled job; the column is null on every row.
-- - The chunks go exactly when the column used to be cleared, by one trigger on the job row: a
--   claim of a new attempt (start_job), running → queued (release_job, requeue_job), running →
--   succeeded (complete_job: the output is in the row; keeping its chunks would store the
--   answer twice until retention), and retention's erasure. A failed or canceled job keeps them
--   as it kept its partial_output (the export shows it) until retention erases its text; a
--   user's erasure deletes their jobs, and the chunks with them (on delete cascade).
-- - A signed-in user reads the chunks of their own jobs, as they read the jobs (RLS).

-- the table ---------------------------------------------------------------------------------------

create table public.job_output_chunks (
  job_id uuid not null references public.generation_jobs (id) on delete cascade,
  attempt integer not null check (attempt >= 1),
  end_char integer not null,
  text text not null,
  constraint job_output_chunks_pkey primary key (job_id, attempt, end_char),
  constraint job_output_chunks_fits check (char_length(text) <= end_char)
);
alter table public.job_output_chunks enable row level security;
comment on table public.job_output_chunks is
  'The running attempt''s streamed text, one row per progress write that brought new text (and '
  'an empty one for a first write with none): appended by record_progress, read in end_char order '
  'by private.partial_output. Deleted when the attempt stops being the job''s without leaving '
  'its text on the job (a new claim, a requeue or release, a completion) and when retention '
  'erases the job''s text (private.drop_output_chunks); a failed or canceled job keeps its last '
  'attempt''s, as its partial output.';
comment on column public.job_output_chunks.end_char is
  'The attempt''s text length, in characters, once this chunk is appended: the last one is what '
  'is stored.';

revoke all on table public.job_output_chunks from public, anon, authenticated;
grant select on table public.job_output_chunks to authenticated;
create policy "users read their own jobs' output" on public.job_output_chunks
  for select to authenticated
  using (exists (select from public.generation_jobs j
                 where j.id = job_output_chunks.job_id and j.user_id = (select auth.uid())));

-- the text the column held moves to the table -----------------------------------------------------
-- Running, failed and canceled jobs held one (the rest had it cleared). A final job may not
-- change (generation_jobs_final_is_final): its trigger is off for this one statement, which
-- changes nothing but the column it moves.

insert into public.job_output_chunks (job_id, attempt, end_char, text)
select j.id, j.attempts, char_length(j.partial_output), j.partial_output
from public.generation_jobs j
where j.partial_output is not null and j.attempts >= 1;

alter table public.generation_jobs disable trigger generation_jobs_final_is_final;
update public.generation_jobs j set partial_output = null where j.partial_output is not null;
alter table public.generation_jobs enable trigger generation_jobs_final_is_final;

alter table public.generation_jobs
  add constraint generation_jobs_partial_output_in_chunks check (partial_output is null);
comment on column public.generation_jobs.partial_output is
  'Always null: the running attempt''s text so far is in public.job_output_chunks, and '
  'private.job_json shows it under this name.';

-- reading it --------------------------------------------------------------------------------------

-- plpgsql, as 20261207300000_plpgsql_helpers.sql made the hot path's helpers: a sql function
-- with a SET clause is planned again on every call, a plpgsql one once a session.
create function private.partial_output(j public.generation_jobs) returns text
language plpgsql stable set search_path = ''
as $$
begin
  return (select pg_catalog.string_agg(c.text, '' order by c.end_char)
          from public.job_output_chunks c
          where c.job_id = j.id and c.attempt = j.attempts);
end
$$;
comment on function private.partial_output(public.generation_jobs) is
  'The job''s current attempt''s text so far (its chunks in order); null before its first '
  'progress write, and once the chunks are gone.';

-- Stable now (it reads the chunks). Only a running, failed or canceled job can have any: the
-- others skip the lookup.
create or replace function private.job_json(j public.generation_jobs) returns jsonb
language plpgsql stable set search_path = ''
as $$
begin
  if j.status in ('running', 'failed', 'canceled') then
    return (pg_catalog.to_jsonb(j) - 'request_hash')
      || pg_catalog.jsonb_build_object('partial_output', private.partial_output(j));
  end if;
  return pg_catalog.to_jsonb(j) - 'request_hash';
end
$$;
comment on function private.job_json(public.generation_jobs) is
  'A job as the functions return it: every column but the prompt hash, partial_output read from '
  'public.job_output_chunks.';

-- dropping it -------------------------------------------------------------------------------------

create function private.drop_output_chunks() returns trigger
language plpgsql set search_path = ''
as $$
begin
  delete from public.job_output_chunks c where c.job_id = old.id;
  return null;
end
$$;
comment on function private.drop_output_chunks() is
  'Deletes a job''s output chunks where its partial_output used to be cleared: a new claim, '
  'running → queued or succeeded, and retention''s erasure (the trigger''s condition).';

create trigger generation_jobs_drop_output_chunks
after update of status, attempts, erased_at on public.generation_jobs
for each row
when ((old.status = 'running'
       and (new.status in ('queued', 'succeeded') or new.attempts <> old.attempts))
      or (old.erased_at is null and new.erased_at is not null))
execute function private.drop_output_chunks();

-- record_progress: the new text only --------------------------------------------------------------

drop function public.record_progress(uuid, integer, text, integer, timestamptz, integer, boolean,
  integer);

create function public.record_progress(
  p_job_id uuid,
  p_attempt integer,
  p_offset integer,
  p_text text,
  p_completion_tokens integer,
  p_now timestamptz default now(),
  p_prompt_tokens integer default null,
  p_thinking boolean default false,
  p_reasoning_tokens integer default null
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_status text;
  v_stored integer;
  v_new text;
begin
  -- Guarded like complete_job: only the claim that is still running may write. Not a
  -- transition (the status does not change), so no event row: one a second would bury the
  -- history. What the attempt consumed is recorded when it ends. The update's row lock also
  -- orders this attempt's writes: the next one reads the chunks this one appends.
  update public.generation_jobs j
  set partial_tokens = greatest(coalesce(p_completion_tokens, 0), 0),
      prompt_tokens = case when p_prompt_tokens is null or p_prompt_tokens < 0 then j.prompt_tokens
        else least(coalesce(j.prompt_tokens, p_prompt_tokens), p_prompt_tokens) end,
      thinking = coalesce(p_thinking, false),
      -- A count once reported is kept (a later write without one does not erase it).
      reasoning_tokens = case when p_reasoning_tokens is null or p_reasoning_tokens < 0
        then j.reasoning_tokens else p_reasoning_tokens end,
      progress_at = p_now,
      updated_at = p_now
  where j.id = p_job_id and j.status = 'running' and j.attempts = p_attempt;
  if not found then
    select j.status into v_status from public.generation_jobs j where j.id = p_job_id;
    if not found then
      return jsonb_build_object('outcome', 'not_found');
    end if;
    -- Canceled, failed, succeeded, requeued or reclaimed: this attempt is no longer the job's.
    return jsonb_build_object('outcome', 'not_running', 'status', v_status);
  end if;

  select max(c.end_char) into v_stored from public.job_output_chunks c
  where c.job_id = p_job_id and c.attempt = p_attempt;
  -- What lies beyond what is stored: nothing for a duplicate, the rest of an overlapping
  -- retry, none of a text whose start is past the stored end (the caller sends from `stored`).
  if p_offset between 0 and coalesce(v_stored, 0) then
    v_new := pg_catalog.substr(coalesce(p_text, ''), coalesce(v_stored, 0) - p_offset + 1);
  end if;
  -- The first write stores a chunk even when empty (thinking): the partial output is '' then,
  -- not null, as it was.
  if v_new <> '' or (v_new is not null and v_stored is null) then
    v_stored := coalesce(v_stored, 0) + char_length(v_new);
    insert into public.job_output_chunks (job_id, attempt, end_char, text)
    values (p_job_id, p_attempt, v_stored, v_new);
  end if;
  return jsonb_build_object('outcome', 'recorded', 'stored', coalesce(v_stored, 0));
end
$$;
comment on function public.record_progress(uuid, integer, integer, text, integer, timestamptz,
  integer, boolean, integer) is
  'The running attempt''s new text (p_text, after the p_offset characters the caller believes '
  'stored: only what lies beyond what is stored is appended, so a retry adds nothing twice), its '
  'completion tokens so far (reasoning included: billed output), whether it is thinking '
  '(reasoning, no visible text yet) and the reasoning tokens reported so far, and '
  '(p_prompt_tokens) its prompt as the worker counts it, which lowers prompt_tokens (never '
  'raises it). recorded with `stored` (the characters stored now: send from there), or '
  'not_running (with the job''s status): the worker then cuts the model''s stream at once.';

revoke all on function public.record_progress(uuid, integer, integer, text, integer, timestamptz,
  integer, boolean, integer) from public, anon, authenticated;
grant execute on function public.record_progress(uuid, integer, integer, text, integer,
  timestamptz, integer, boolean, integer) to service_role;
