-- quota-jobs: the idempotency key's unique index holds only the jobs that have a key.
--
-- The unique constraint on (user_id, idempotency_key) indexed every job, keyless ones too (a null
-- key never conflicts, so their entries guarded nothing). Every status change is a non-HOT update,
-- so each keyless job wrote three such entries in its life (the insert, the claim, the ending),
-- each in the WAL. A partial unique index keeps the same guarantee for keyed jobs (enqueue's
-- lookup, `user_id = $1 and idempotency_key = $2`, implies the predicate and still walks it) and
-- writes nothing for a keyless one; retention's erasure nulls the key, which drops its entry.
--
-- On a large table, build the index by hand first with `create unique index concurrently
-- generation_jobs_idempotency_key_per_user_partial ...` and rename it; this file takes the short
-- write lock of a plain build, as every migration here does.

alter table public.generation_jobs drop constraint generation_jobs_idempotency_key_per_user;
create unique index generation_jobs_idempotency_key_per_user on public.generation_jobs
  (user_id, idempotency_key) where idempotency_key is not null;
comment on index public.generation_jobs_idempotency_key_per_user is
  'One job per user and Idempotency-Key; keyless jobs are not indexed.';
