-- quota-jobs: a failure reason for the provider refusing OUR configuration.
--
-- A revoked or wrong key (401), a region or project the provider does not serve (403), an unknown
-- model (404) or a parameter the model does not take (400 unsupported_parameter) used to end the
-- job as model_refused: the reason a prompt causes, counted into the users' roll-up and never
-- paged. The worker (lib/worker.ts) now fails such a job as provider_misconfigured and pages
-- on-call at once. fail_job needs no change: every failure by us captures 0 and releases the whole
-- hold (docs/DESIGN.md#metering-hold-and-capture), whatever its reason; only the check on the
-- column has to admit the new value.
--
-- The list is the one in 20261201050000_attempt_budget.sql plus 'provider_misconfigured'.

alter table public.generation_jobs
  drop constraint generation_jobs_failure_reason_check,
  add constraint generation_jobs_failure_reason_check check (failure_reason in (
    'model_refused', 'delivery_failed', 'publish_failed', 'provider_quota_exhausted',
    'lease_expired', 'max_age_exceeded', 'never_delivered', 'attempt_budget_exhausted',
    'provider_misconfigured'
  ));

comment on constraint generation_jobs_failure_reason_check on public.generation_jobs is
  'Why a failed job failed. provider_misconfigured: the AI provider refused our configuration '
  '(key, region, permission, model, request parameters), not the prompt; refunded and paged.';
