-- The schema as supabase/migrations make it today, generated from the catalogue by
-- `npm run db:schema` (dev/postgres/schema.ts). Do not edit: change a migration, then
-- regenerate; test/db/schema-file.test.ts fails when the two differ.

-- tables ------------------------------------------------------------------------------------------

create table private.history_horizon (
  id boolean not null default true,
  events_complete_since timestamp with time zone not null,
  constraint history_horizon_id_check CHECK (id),
  constraint history_horizon_pkey PRIMARY KEY (id)
);
alter table private.history_horizon enable row level security;
comment on table private.history_horizon is 'One row: every event at or after events_complete_since is kept; earlier ones may have been dropped by public.maintain_job_events (-infinity until the first drop).';

create table private.job_events_default partition of public.job_events default;
comment on table private.job_events_default is 'Events whose month has no partition of its own yet. Normally empty.';

create table private.user_pseudonyms (
  user_id uuid not null,
  pseudonym text not null default ('u'::text || replace((gen_random_uuid())::text, '-'::text, ''::text)),
  created_at timestamp with time zone not null default now(),
  constraint user_pseudonyms_pkey PRIMARY KEY (user_id),
  constraint user_pseudonyms_pseudonym_key UNIQUE (pseudonym),
  constraint user_pseudonyms_user_id_fkey FOREIGN KEY (user_id) REFERENCES auth.users(id) ON DELETE CASCADE
);
alter table private.user_pseudonyms enable row level security;
comment on table private.user_pseudonyms is 'The pseudonym log lines name a user by: random (a v4 UUID''s bits, not derived from the user id), made on first use by public.user_pseudonym. Erasure deletes the row (and the auth.users cascade would): a pseudonym in a log line kept after that links to no one. No policy.';

create table public.erased_usage (
  period_start timestamp with time zone not null,
  plan_id text not null,
  kind text not null,
  meter text not null,
  jobs bigint not null default 0,
  captured bigint not null default 0,
  consumed bigint not null default 0,
  prompt_tokens bigint not null default 0,
  completion_tokens bigint not null default 0,
  updated_at timestamp with time zone not null,
  constraint erased_usage_captured_check CHECK (captured >= 0),
  constraint erased_usage_completion_tokens_check CHECK (completion_tokens >= 0),
  constraint erased_usage_consumed_check CHECK (consumed >= 0),
  constraint erased_usage_jobs_check CHECK (jobs >= 0),
  constraint erased_usage_pkey PRIMARY KEY (period_start, plan_id, kind, meter),
  constraint erased_usage_prompt_tokens_check CHECK (prompt_tokens >= 0)
);
alter table public.erased_usage enable row level security;
comment on table public.erased_usage is 'What erased users'' jobs cost, without them: per quota period, plan, kind and meter, how many jobs, the units they captured, the tokens their non-final attempts consumed, and the tokens their attempts were billed (usage events; a running attempt canceled by the erasure: its prompt and last recorded progress). No user, no job id, no time finer than the period: it reconciles the provider''s bill, it cannot say whose usage it was. Written only by private.erase_user_data. No policy: the service role reads it.';

create table public.generation_jobs (
  id uuid not null default gen_random_uuid(),
  user_id uuid not null,
  status text not null default 'queued'::text,
  prompt text not null,
  request_hash text not null,
  idempotency_key text,
  plan_id text not null,
  period_start timestamp with time zone not null,
  output text,
  failure_reason text,
  last_error text,
  attempts integer not null default 0,
  provider_quota_hits integer not null default 0,
  publish_seq integer not null default 1,
  republish_count integer not null default 0,
  resume_at timestamp with time zone,
  lease_expires_at timestamp with time zone,
  created_at timestamp with time zone not null,
  queued_at timestamp with time zone not null,
  started_at timestamp with time zone,
  finished_at timestamp with time zone,
  refunded_at timestamp with time zone,
  updated_at timestamp with time zone not null,
  partial_output text,
  partial_tokens integer not null default 0,
  progress_at timestamp with time zone,
  refund_withheld text,
  meter text not null default 'jobs'::text,
  prompt_tokens integer,
  hold integer not null default 1,
  captured integer,
  consumed integer not null default 0,
  waiting_for text,
  capacity_wait_since timestamp with time zone,
  thinking boolean not null default false,
  reasoning_tokens integer,
  kind text not null default 'document'::text,
  input jsonb not null,
  erased_at timestamp with time zone,
  model text,
  service_tier text,
  reasons boolean not null default false,
  organization_id uuid,
  constraint generation_jobs_kind_fkey FOREIGN KEY (kind) REFERENCES public.job_kinds(id),
  constraint generation_jobs_organization_id_fkey FOREIGN KEY (organization_id) REFERENCES public.organizations(id),
  constraint generation_jobs_pkey PRIMARY KEY (id),
  constraint generation_jobs_plan_id_fkey FOREIGN KEY (plan_id) REFERENCES public.plans(id),
  constraint generation_jobs_valid CHECK (private.generation_job_valid(generation_jobs.*))
);
alter table public.generation_jobs enable row level security;
comment on table public.generation_jobs is 'One row per requested job (a document, an extraction): its state, the quota period it reserved from, and its refund. The row is also the outbox: a queued row whose message was lost is republished or ended by the sweeper.';
comment on column public.generation_jobs.request_hash is 'sha256 of the prompt (a document) or of the kind and the input''s jsonb text (any other kind): an Idempotency-Key replay with another request is refused, not served the old job.';
comment on column public.generation_jobs.attempts is 'How many times a worker claimed the job; the claim number guards complete/requeue/release/fail.';
comment on column public.generation_jobs.publish_seq is 'Which QStash message currently stands for the job; the publish deduplication id is job id + this.';
comment on column public.generation_jobs.refunded_at is 'When the reserved unit came back. Set by the same statement that ends the job failed or canceled.';
comment on column public.generation_jobs.partial_output is 'Always null: the running attempt''s text so far is in public.job_output_chunks, and private.job_json shows it under this name.';
comment on column public.generation_jobs.partial_tokens is 'Completion tokens the running attempt has streamed so far (as counted by the worker).';
comment on column public.generation_jobs.progress_at is 'When the running attempt last recorded its progress.';
comment on column public.generation_jobs.refund_withheld is 'Why a job plan''s failed or canceled job kept its unit spent: running_cancel_limit (canceled while running) or paid_refund_limit (failed, or canceled while queued, after its attempts consumed provider tokens), when the user''s refunds after spend had reached the plan''s bound. Null on every other job.';
comment on column public.generation_jobs.meter is 'The meter of the job''s plan when it was enqueued (a later plan change does not reprice it).';
comment on column public.generation_jobs.prompt_tokens is 'The prompt''s tokens as counted at enqueue (chat framing included); null on jobs older than metering.';
comment on column public.generation_jobs.hold is 'What enqueue added to the counter: the kind''s units on a job plan; prompt_tokens + max_output_tokens on a token plan; that call''s worst case in micro-dollars on a money plan.';
comment on column public.generation_jobs.captured is 'Null while active. On an ending, what the job kept of its hold (0 ≤ captured ≤ hold); the rest went back to the counter in the same transaction.';
comment on column public.generation_jobs.consumed is 'What the job''s attempts that did not end it cost, in its meter''s unit (tokens on a job or token plan, micro-dollars on a money plan): released attempts'' usage, reclaimed attempts'' last progress. A token or money plan''s job never starts an attempt that could take it past 2 × hold.';
comment on column public.generation_jobs.waiting_for is 'What the last requeue waits for: provider (a quota 429 or the closed provider gate) or capacity (flex had none). Meaningful while resume_at is ahead; cleared by a claim.';
comment on column public.generation_jobs.capacity_wait_since is 'When the job first met no flex capacity (429 resource unavailable). Never cleared: the plan''s flex_fallback_after_seconds counts from it.';
comment on column public.generation_jobs.thinking is 'The running attempt reports reasoning and has streamed no visible text yet (record_progress).';
comment on column public.generation_jobs.reasoning_tokens is 'The running attempt''s reasoning tokens as the provider reported them so far (billed output, part of partial_tokens); null when none were reported.';
comment on column public.generation_jobs.kind is 'What the job does (public.job_kinds): document or extract.';
comment on column public.generation_jobs.input is 'The whole input as the client sent it: {"prompt"} for a document, {"text", "schema"} for an extraction. The prompt column holds the prompt or the text.';
comment on column public.generation_jobs.erased_at is 'When retention erased the job''s text (prompt '''', input {}, output, partial output, error, idempotency key and prompt hash gone). Null: the text is still there. Only a finished job is erased; its accounting columns are untouched.';
comment on column public.generation_jobs.model is 'The model the job runs on: its plan''s, else the deployment''s OPENAI_MODEL as enqueue was told it (null: neither).';
comment on column public.generation_jobs.service_tier is 'The plan''s service tier when the job was enqueued: a money plan''s hold is priced at it (or at the standard tier, when dearer).';
comment on column public.generation_jobs.reasons is 'The job''s model reasons at the plan''s effort (or is not in the price book): an attempt the provider reported no usage for costs its bound (private.attempt_cost).';
comment on column public.generation_jobs.organization_id is 'The organization whose pool the job holds on (its plan is the organization''s); null: the user''s own plan and quota_usage.';

create table public.job_events (
  id bigint not null generated always as identity,
  job_id uuid not null,
  user_id uuid not null,
  at timestamp with time zone not null,
  event text not null,
  from_status text,
  to_status text not null,
  detail jsonb not null default '{}'::jsonb,
  constraint job_events_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.generation_jobs(id),
  constraint job_events_pkey PRIMARY KEY (id, at)
) partition by range (at);
-- (its ranged partitions are made at run time, by date, and not listed here)
alter table public.job_events enable row level security;
comment on table public.job_events is 'Append-only log of every transition, written in the transition''s own transaction. Partitioned by UTC month on at (partitions in schema private); months older than the retention are dropped whole by public.maintain_job_events.';

create table public.job_kinds (
  id text not null,
  name text not null,
  constraint job_kinds_pkey PRIMARY KEY (id)
);
alter table public.job_kinds enable row level security;
comment on table public.job_kinds is 'What a job does with its input: document (a prompt in, markdown out), extract (a text and a JSON Schema in, a JSON value out). lib/kinds/index.ts is the one list.';

create table public.job_output_chunks (
  job_id uuid not null,
  attempt integer not null,
  end_char integer not null,
  text text not null,
  constraint job_output_chunks_attempt_check CHECK (attempt >= 1),
  constraint job_output_chunks_fits CHECK (char_length(text) <= end_char),
  constraint job_output_chunks_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.generation_jobs(id) ON DELETE CASCADE,
  constraint job_output_chunks_pkey PRIMARY KEY (job_id, attempt, end_char)
);
alter table public.job_output_chunks enable row level security;
comment on table public.job_output_chunks is 'The running attempt''s streamed text, one row per progress write that brought new text (and an empty one for a first write with none): appended by record_progress, read in end_char order by private.partial_output. Deleted when the attempt stops being the job''s without leaving its text on the job (a new claim, a requeue or release, a completion) and when retention erases the job''s text (private.drop_output_chunks); a failed or canceled job keeps its last attempt''s, as its partial output.';
comment on column public.job_output_chunks.end_char is 'The attempt''s text length, in characters, once this chunk is appended: the last one is what is stored.';

create table public.model_tiers (
  model_id text not null,
  tier text not null,
  input_per_mtok bigint not null,
  cached_input_per_mtok bigint not null,
  output_per_mtok bigint not null,
  constraint model_tiers_cached_check CHECK (cached_input_per_mtok >= 0),
  constraint model_tiers_input_check CHECK (input_per_mtok >= 0),
  constraint model_tiers_model_id_fkey FOREIGN KEY (model_id) REFERENCES public.models(id) ON DELETE CASCADE,
  constraint model_tiers_output_check CHECK (output_per_mtok >= 0),
  constraint model_tiers_pkey PRIMARY KEY (model_id, tier),
  constraint model_tiers_tier_check CHECK (tier = ANY (ARRAY['default'::text, 'flex'::text, 'priority'::text]))
);
alter table public.model_tiers enable row level security;
comment on table public.model_tiers is 'The service tiers each model is offered on and their prices, in micro-dollars (USD 1e-6) per million tokens: input, cached input, output (reasoning included). A tier without a row is not offered: the provider answers 400 for it.';

create table public.models (
  id text not null,
  reasons boolean not null,
  reasoning_efforts text[] not null default '{}'::text[],
  max_output_tokens integer not null,
  context_window integer not null,
  shutdown_date date,
  catalogue_checked_at timestamp with time zone,
  priced_on date not null,
  source text not null,
  constraint models_context_window_check CHECK (context_window >= max_output_tokens),
  constraint models_efforts_known CHECK (reasoning_efforts <@ ARRAY['none'::text, 'minimal'::text, 'low'::text, 'medium'::text, 'high'::text, 'xhigh'::text]),
  constraint models_efforts_only_when_reasoning CHECK (reasons OR reasoning_efforts = '{}'::text[]),
  constraint models_max_output_tokens_check CHECK (max_output_tokens >= 16),
  constraint models_pkey PRIMARY KEY (id)
);
alter table public.models enable row level security;
comment on table public.models is 'The price book''s models: whether each reasons by default (reasoning tokens are billed as output and never streamed) and which reasoning efforts it takes, its largest output and context, and when and where its prices were read. shutdown_date is the provider''s (GET /v1/models/{id}), written by the catalogue watch; from that day enqueue refuses jobs on it (model_retired).';
comment on column public.models.catalogue_checked_at is 'When the catalogue watch last read the model from the provider (null: never).';

create table public.organization_invitations (
  id uuid not null default gen_random_uuid(),
  organization_id uuid not null,
  token_hash text not null,
  role text not null,
  cap integer,
  invited_by uuid,
  created_at timestamp with time zone not null,
  expires_at timestamp with time zone not null,
  accepted_at timestamp with time zone,
  accepted_by uuid,
  email text,
  constraint organization_invitations_accepted_by_fkey FOREIGN KEY (accepted_by) REFERENCES auth.users(id) ON DELETE SET NULL,
  constraint organization_invitations_accepted_by_when_accepted CHECK (accepted_by IS NULL OR accepted_at IS NOT NULL),
  constraint organization_invitations_cap_check CHECK (cap >= 0),
  constraint organization_invitations_email_check CHECK (email IS NULL OR email = lower(email) AND email ~ '^[^@[:space:]]+@[^@[:space:]]+$'::text),
  constraint organization_invitations_expires_after_created CHECK (expires_at > created_at),
  constraint organization_invitations_invited_by_fkey FOREIGN KEY (invited_by) REFERENCES auth.users(id) ON DELETE SET NULL,
  constraint organization_invitations_organization_id_fkey FOREIGN KEY (organization_id) REFERENCES public.organizations(id) ON DELETE CASCADE,
  constraint organization_invitations_pkey PRIMARY KEY (id),
  constraint organization_invitations_role_check CHECK (role = ANY (ARRAY['admin'::text, 'member'::text])),
  constraint organization_invitations_token_hash_key UNIQUE (token_hash)
);
alter table public.organization_invitations enable row level security;
comment on table public.organization_invitations is 'An invitation to join an organization as admin or member (with a cap), accepted at most once and only before expires_at. token_hash is the SHA-256 of the token create_invitation answered once. No policy: the service role reads it.';
comment on column public.organization_invitations.email is 'The address the invitation was sent to, lower case, while it is pending: only the user whose address it is can accept it. Nulled when accepted; deleted with its user.';

create table public.organization_member_usage (
  organization_id uuid not null,
  user_id uuid not null,
  period_start timestamp with time zone not null,
  meter text not null,
  units_used integer not null default 0,
  updated_at timestamp with time zone not null,
  constraint organization_member_usage_meter_check CHECK (meter = ANY (ARRAY['jobs'::text, 'tokens'::text, 'money'::text])),
  constraint organization_member_usage_organization_id_fkey FOREIGN KEY (organization_id) REFERENCES public.organizations(id) ON DELETE CASCADE,
  constraint organization_member_usage_pkey PRIMARY KEY (organization_id, user_id, period_start, meter),
  constraint organization_member_usage_units_used_check CHECK (units_used >= 0)
);
alter table public.organization_member_usage enable row level security;
comment on table public.organization_member_usage is 'What one member''s organization jobs hold and captured per period and meter, under their cap. Changed only by the transition functions, with the pool row, after it.';

create table public.organization_members (
  organization_id uuid not null,
  user_id uuid not null,
  role text not null,
  cap integer,
  created_at timestamp with time zone not null default now(),
  constraint organization_members_cap_check CHECK (cap >= 0),
  constraint organization_members_organization_id_fkey FOREIGN KEY (organization_id) REFERENCES public.organizations(id) ON DELETE CASCADE,
  constraint organization_members_pkey PRIMARY KEY (organization_id, user_id),
  constraint organization_members_role_check CHECK (role = ANY (ARRAY['owner'::text, 'admin'::text, 'member'::text])),
  constraint organization_members_user_id_fkey FOREIGN KEY (user_id) REFERENCES auth.users(id) ON DELETE CASCADE
);
alter table public.organization_members enable row level security;
comment on table public.organization_members is 'Who belongs to an organization, as owner, admin or member.';
comment on column public.organization_members.cap is 'The most this member may hold in one period, in the organization''s plan''s meter (jobs, tokens or micro-dollars), set by an owner or admin. Null: no cap beyond the pool.';

create table public.organization_usage (
  organization_id uuid not null,
  period_start timestamp with time zone not null,
  meter text not null,
  units_used integer not null default 0,
  paid_refunds integer not null default 0,
  erased_units bigint not null default 0,
  updated_at timestamp with time zone not null,
  constraint organization_usage_erased_units_check CHECK (erased_units >= 0),
  constraint organization_usage_meter_check CHECK (meter = ANY (ARRAY['jobs'::text, 'tokens'::text, 'money'::text])),
  constraint organization_usage_organization_id_fkey FOREIGN KEY (organization_id) REFERENCES public.organizations(id) ON DELETE CASCADE,
  constraint organization_usage_paid_refunds_check CHECK (paid_refunds >= 0),
  constraint organization_usage_pkey PRIMARY KEY (organization_id, period_start, meter),
  constraint organization_usage_units_used_check CHECK (units_used >= 0)
);
alter table public.organization_usage enable row level security;
comment on table public.organization_usage is 'An organization''s pool per period and meter: what its jobs hold and captured, net of refunds. Changed only by the transition functions, locked after the job row and before the member''s row.';
comment on column public.organization_usage.paid_refunds is 'Refunds after provider spend of the organization''s jobs in this period, under its plan''s bound (private.refund_bound).';
comment on column public.organization_usage.erased_units is 'What the jobs of erased members captured (part of units_used): their jobs are gone, the pool''s accounting stays (quota_drift counts it).';

create table public.organizations (
  id uuid not null default gen_random_uuid(),
  name text not null,
  plan text not null,
  created_at timestamp with time zone not null default now(),
  constraint organizations_name_check CHECK (char_length(name) >= 1 AND char_length(name) <= 200),
  constraint organizations_pkey PRIMARY KEY (id),
  constraint organizations_plan_fkey FOREIGN KEY (plan) REFERENCES public.plans(id)
);
alter table public.organizations enable row level security;
comment on table public.organizations is 'A team on one plan (plan): its members'' organization jobs hold on its pool (public.organization_usage) under that plan''s limit.';

create table public.plan_kinds (
  plan_id text not null,
  kind text not null,
  units integer not null,
  model text,
  constraint plan_kinds_check_model TRIGGER,
  constraint plan_kinds_kind_fkey FOREIGN KEY (kind) REFERENCES public.job_kinds(id),
  constraint plan_kinds_model_fkey FOREIGN KEY (model) REFERENCES public.models(id),
  constraint plan_kinds_pkey PRIMARY KEY (plan_id, kind),
  constraint plan_kinds_plan_id_fkey FOREIGN KEY (plan_id) REFERENCES public.plans(id) ON DELETE CASCADE,
  constraint plan_kinds_units_check CHECK (units > 0)
);
alter table public.plan_kinds enable row level security;
comment on table public.plan_kinds is 'Which kinds a plan offers; units is what a job of the kind holds on a job plan (a token plan holds tokens whatever the kind). A kind without a row is refused (kind_not_in_plan).';
comment on column public.plan_kinds.model is 'The model a job of this kind runs on under this plan (public.models). Null: the plan''s, else the deployment''s OPENAI_MODEL. It must offer the plan''s tier, take its reasoning effort and allow its max_output_tokens.';

create table public.plans (
  id text not null,
  name text not null,
  period text not null,
  units_per_period integer not null,
  max_active_jobs integer not null,
  for_anonymous_users boolean not null default false,
  max_output_tokens integer not null default 512,
  max_paid_refunds integer,
  meter text not null default 'jobs'::text,
  service_tier text not null default 'default'::text,
  flex_fallback_after_seconds integer,
  model text,
  reasoning_effort text,
  constraint plans_check_kind_models TRIGGER,
  constraint plans_fallback_only_on_flex CHECK (flex_fallback_after_seconds IS NULL OR service_tier = 'flex'::text),
  constraint plans_flex_fallback_after_seconds_check CHECK (flex_fallback_after_seconds >= 0),
  constraint plans_max_active_jobs_check CHECK (max_active_jobs >= 1),
  constraint plans_max_output_tokens_check CHECK (max_output_tokens >= 16),
  constraint plans_max_paid_refunds_check CHECK (max_paid_refunds >= 0),
  constraint plans_meter_check CHECK (meter = ANY (ARRAY['jobs'::text, 'tokens'::text, 'money'::text])),
  constraint plans_period_check CHECK (period = ANY (ARRAY['day'::text, 'month'::text])),
  constraint plans_pkey PRIMARY KEY (id),
  constraint plans_priced_plans_name_a_model CHECK (model IS NOT NULL OR service_tier = 'default'::text AND meter <> 'money'::text),
  constraint plans_reasoning_effort_check CHECK (reasoning_effort = ANY (ARRAY['none'::text, 'minimal'::text, 'low'::text, 'medium'::text, 'high'::text, 'xhigh'::text])),
  constraint plans_service_tier_check CHECK (service_tier = ANY (ARRAY['default'::text, 'flex'::text, 'priority'::text])),
  constraint plans_tier_offered FOREIGN KEY (model, service_tier) REFERENCES public.model_tiers(model_id, tier),
  constraint plans_units_per_period_check CHECK (units_per_period >= 0)
);
alter table public.plans enable row level security;
comment on table public.plans is 'Usage plans: how many units a user may reserve per UTC period and how many jobs may be active at once.';
comment on column public.plans.for_anonymous_users is 'Anonymous sign-ins without a user_plans row are on this plan. At most one plan says so; when none does, they are on ''none'' (no units).';
comment on column public.plans.max_output_tokens is 'The most completion tokens one model attempt may produce (sent as max_completion_tokens).';
comment on column public.plans.max_paid_refunds is 'How many jobs per period get their unit back after the provider billed them: running cancels, failures and queued cancels after a consumed attempt. Null: as many as units_per_period. Job plans only: a token plan captures what was consumed instead.';
comment on column public.plans.meter is 'jobs: units_per_period counts jobs (a job holds its kind''s units). tokens: it counts tokens (a job holds its prompt tokens plus max_output_tokens and captures what it consumed). money: it counts micro-dollars of the provider''s bill (a job holds its worst case at the price book''s prices and captures what the provider billed).';
comment on column public.plans.service_tier is 'OpenAI''s service tier for this plan''s model calls: default, or flex (Batch prices, slower, may answer 429 resource unavailable; the job then waits for capacity without counting a provider quota hit).';
comment on column public.plans.flex_fallback_after_seconds is 'A flex plan''s job that has waited this long for flex capacity runs its next attempt on the default tier. Null: never (the job waits within its max age, then fails capacity_unavailable, refunded).';
comment on column public.plans.model is 'The model the plan''s jobs run on (public.models). Null: the deployment''s OPENAI_MODEL.';
comment on column public.plans.reasoning_effort is 'The reasoning effort sent with the plan''s calls (one its model takes). Null: the model''s default, which reasons on a reasoning model. none: no hidden reasoning.';

create table public.quota_usage (
  user_id uuid not null,
  period_start timestamp with time zone not null,
  units_used integer not null default 0,
  updated_at timestamp with time zone not null default now(),
  paid_refunds integer not null default 0,
  meter text not null default 'jobs'::text,
  constraint quota_usage_meter_check CHECK (meter = ANY (ARRAY['jobs'::text, 'tokens'::text, 'money'::text])),
  constraint quota_usage_paid_refunds_check CHECK (paid_refunds >= 0),
  constraint quota_usage_pkey PRIMARY KEY (user_id, period_start, meter),
  constraint quota_usage_units_used_check CHECK (units_used >= 0)
);
alter table public.quota_usage enable row level security;
comment on table public.quota_usage is 'Units reserved per user and UTC period, net of refunds. Changed only by the transition functions.';
comment on column public.quota_usage.paid_refunds is 'Refunds after provider spend in this period: running cancels, failures and queued cancels after a consumed attempt. Changed only by private.end_with_refund, with the refund, in the same statement.';
comment on column public.quota_usage.meter is 'What units_used counts: jobs, tokens or micro-dollars. A job holds on the counter of its own meter.';

create table public.superseded_callbacks (
  id bigint not null generated always as identity,
  job_id uuid,
  at timestamp with time zone not null,
  message_seq integer not null,
  job_seq integer not null,
  constraint superseded_callbacks_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.generation_jobs(id) ON DELETE SET NULL,
  constraint superseded_callbacks_pkey PRIMARY KEY (id)
);
alter table public.superseded_callbacks enable row level security;
comment on table public.superseded_callbacks is 'One row per failure callback that fail_job answered superseded (the failed message was older than the job''s current one): nothing changed, no refund. Read by the operator page; no user reads it (RLS on, no policy).';
comment on column public.superseded_callbacks.job_id is 'The job whose old message''s callback was superseded; null once the job was erased with its user (private.erase_user_data): the row is kept, anonymous, for the operator page''s count.';

create table public.user_plans (
  user_id uuid not null,
  plan_id text not null,
  updated_at timestamp with time zone not null default now(),
  constraint user_plans_pkey PRIMARY KEY (user_id),
  constraint user_plans_plan_id_fkey FOREIGN KEY (plan_id) REFERENCES public.plans(id),
  constraint user_plans_user_id_fkey FOREIGN KEY (user_id) REFERENCES auth.users(id) ON DELETE CASCADE
);
alter table public.user_plans enable row level security;
comment on table public.user_plans is 'Which plan a user is on. A user without a row is on the free plan.';

-- indexes (other than those of constraints) -------------------------------------------------------

CREATE INDEX generation_jobs_active_created ON public.generation_jobs USING btree (created_at) WHERE (status = ANY (ARRAY['queued'::text, 'running'::text]));
CREATE INDEX generation_jobs_created ON public.generation_jobs USING btree (created_at);
CREATE INDEX generation_jobs_finished ON public.generation_jobs USING btree (finished_at) WHERE (finished_at IS NOT NULL);
CREATE INDEX generation_jobs_finished_unerased ON public.generation_jobs USING btree (finished_at) WHERE ((erased_at IS NULL) AND (finished_at IS NOT NULL));
CREATE UNIQUE INDEX generation_jobs_idempotency_key_per_user ON public.generation_jobs USING btree (user_id, idempotency_key) WHERE (idempotency_key IS NOT NULL);
CREATE INDEX generation_jobs_organization_period ON public.generation_jobs USING btree (organization_id, period_start, meter, user_id) INCLUDE (hold, captured) WHERE (organization_id IS NOT NULL);
CREATE INDEX generation_jobs_period ON public.generation_jobs USING btree (period_start, user_id, meter) INCLUDE (hold, captured);
CREATE INDEX generation_jobs_queued_since ON public.generation_jobs USING btree (COALESCE(resume_at, queued_at)) WHERE (status = 'queued'::text);
CREATE INDEX generation_jobs_running_lease ON public.generation_jobs USING btree (lease_expires_at) WHERE (status = 'running'::text);
CREATE INDEX generation_jobs_user_active ON public.generation_jobs USING btree (user_id) WHERE (status = ANY (ARRAY['queued'::text, 'running'::text]));
CREATE INDEX generation_jobs_user_created ON public.generation_jobs USING btree (user_id, created_at DESC, id DESC);
CREATE INDEX job_events_at ON ONLY public.job_events USING btree (at);
CREATE INDEX job_events_job ON ONLY public.job_events USING btree (job_id, id);
CREATE INDEX job_events_user ON ONLY public.job_events USING btree (user_id, id);
CREATE INDEX organization_invitations_email ON public.organization_invitations USING btree (email) WHERE (email IS NOT NULL);
CREATE INDEX organization_invitations_organization ON public.organization_invitations USING btree (organization_id);
CREATE INDEX organization_member_usage_user ON public.organization_member_usage USING btree (user_id);
CREATE INDEX organization_members_user ON public.organization_members USING btree (user_id);
CREATE UNIQUE INDEX plans_one_for_anonymous_users ON public.plans USING btree (for_anonymous_users) WHERE for_anonymous_users;
CREATE INDEX quota_usage_period ON public.quota_usage USING btree (period_start);
CREATE INDEX superseded_callbacks_at ON public.superseded_callbacks USING btree (at);

-- views -------------------------------------------------------------------------------------------

create view public.quota_drift with (security_invoker=true) as
 SELECT user_id,
    period_start,
    units_used,
    units_expected,
    meter,
    organization_id
   FROM private.quota_drift_since('-infinity'::timestamp with time zone) d(user_id, period_start, units_used, units_expected, meter, organization_id);
comment on view public.quota_drift is 'Counters that differ from their open holds plus their captures (an active job counts its hold, a final one what it captured): a user''s (organization_id null), an organization''s pool (user_id null) or a member''s row in an organization (both set). Always empty.';

-- functions ---------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION private.attempt_cost(p_job public.generation_jobs, p_prompt integer, p_cached integer, p_completion integer, p_served_tier text, p_reported boolean)
 RETURNS integer
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
declare
  v_prompt integer := greatest(p_prompt, 0);
  v_cached integer := least(greatest(p_cached, 0), greatest(p_prompt, 0));
  v_completion integer := greatest(p_completion, 0);
  v_in bigint;
  v_cached_in bigint;
  v_out bigint;
begin
  -- Hidden reasoning cut short: billed, never reported. The attempt's bound.
  if p_job.meter <> 'jobs' and p_job.reasons and not p_reported and v_prompt + v_completion > 0 then
    return p_job.hold;
  end if;
  -- Job and token plans count tokens: no price is read (the hot path of every job plan).
  if p_job.meter <> 'money' then
    return v_prompt + v_completion;
  end if;
  -- The tier the provider says it served, when the price book has it; else what was held.
  if p_reported and p_served_tier is not null then
    select t.input_per_mtok, t.cached_input_per_mtok, t.output_per_mtok
    into v_in, v_cached_in, v_out
    from public.model_tiers t where t.model_id = p_job.model and t.tier = p_served_tier;
  end if;
  if v_in is null then
    select h.input_per_mtok, h.cached_input_per_mtok, h.output_per_mtok
    into v_in, v_cached_in, v_out
    from private.held_prices(p_job.model, p_job.service_tier) h;
  end if;
  if v_in is null then
    return p_job.hold;
  end if;
  return least(ceil(((v_prompt - v_cached)::numeric * v_in + v_cached::numeric * v_cached_in
    + v_completion::numeric * v_out) / 1000000), 2147483647)::integer;
end
$function$;
comment on function private.attempt_cost(p_job public.generation_jobs, p_prompt integer, p_cached integer, p_completion integer, p_served_tier text, p_reported boolean) is 'What one attempt cost in the job''s meter''s unit. Tokens (job and token plans): prompt + completion. Money: micro-dollars, rounded up, the provider''s usage at the tier it served (p_reported), a count of ours at the held prices; cached input at the cached price. A reasoning job''s attempt the provider did not report (cut short) costs its bound, the hold.';

CREATE OR REPLACE FUNCTION private.broadcast_job_state()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
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
$function$;
comment on function private.broadcast_job_state() is 'Broadcasts {job_id, state, seq} on the private Realtime topic job:<user id> for a job_events row that changes the status, in the transition''s transaction: a plain insert into realtime.messages when today''s partition exists and the caller may insert without a policy, else realtime.send (which warns instead of failing).';

CREATE OR REPLACE FUNCTION private.cancel_refunds(p_job public.generation_jobs)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return (
  select case
    when p_job.status not in ('queued', 'running') then false
    when p_job.meter in ('tokens', 'money') then true
    -- A job plan's queued job whose attempts consumed nothing: always.
    when p_job.status = 'queued' and p_job.consumed = 0 then true
    when p_job.organization_id is not null then coalesce((
      select q.paid_refunds < private.refund_bound(p)
      from public.organization_usage q, public.plans p
      where q.organization_id = p_job.organization_id and q.period_start = p_job.period_start
        and q.meter = p_job.meter and p.id = p_job.plan_id
    ), false)
    else coalesce((
      select q.paid_refunds < private.refund_bound(p)
      from public.quota_usage q, public.plans p
      where q.user_id = p_job.user_id and q.period_start = p_job.period_start
        and q.meter = p_job.meter and p.id = p_job.plan_id
    ), false)
  end
  );
end
$function$;
comment on function private.cancel_refunds(p_job public.generation_jobs) is 'Whether canceling this job now would give back what it holds: on a token plan, the rest beyond what it consumed; on a job plan, always for a queued job whose attempts consumed nothing, else while the refunds after spend of its period (an organization job: its pool''s) are under its plan''s bound.';

CREATE OR REPLACE FUNCTION private.check_kind_models(p_plan_id text, p_kind text DEFAULT NULL::text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
declare
  v record;
begin
  for v in
    select k.kind, k.model, p.id as plan_id, p.service_tier, p.max_output_tokens,
      p.reasoning_effort, m.max_output_tokens as model_max, m.reasoning_efforts,
      exists (select from public.model_tiers t
        where t.model_id = k.model and t.tier = p.service_tier) as tier_offered
    from public.plan_kinds k
    join public.plans p on p.id = k.plan_id
    join public.models m on m.id = k.model
    where k.plan_id = p_plan_id and (p_kind is null or k.kind = p_kind)
  loop
    if not v.tier_offered then
      raise exception 'plan %, kind %: model % is not offered on tier %',
        v.plan_id, v.kind, v.model, v.service_tier
        using errcode = '23514', constraint = 'plan_kinds_tier_offered';
    end if;
    if v.max_output_tokens > v.model_max then
      raise exception 'plan %, kind %: max_output_tokens % is above model %''s largest output %',
        v.plan_id, v.kind, v.max_output_tokens, v.model, v.model_max
        using errcode = '23514', constraint = 'plan_kinds_output_within_model';
    end if;
    if v.reasoning_effort is not null and not (v.reasoning_effort = any (v.reasoning_efforts)) then
      raise exception 'plan %, kind %: model % does not take reasoning effort %',
        v.plan_id, v.kind, v.model, v.reasoning_effort
        using errcode = '23514', constraint = 'plan_kinds_effort_of_model';
    end if;
  end loop;
end
$function$;
comment on function private.check_kind_models(p_plan_id text, p_kind text) is 'A plan''s kinds that name a model keep within it: the model offers the plan''s tier, allows its output bound and takes its reasoning effort (23514 otherwise).';

CREATE OR REPLACE FUNCTION private.check_plan_kind_model()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
  if tg_table_name = 'plan_kinds' then
    if new.model is not null then
      perform private.check_kind_models(new.plan_id, new.kind);
    end if;
  else
    perform private.check_kind_models(new.id);
  end if;
  return null;
end
$function$;
comment on function private.check_plan_kind_model() is 'private.check_kind_models after a kind''s model, or its plan''s tier, bound or effort, is written.';

CREATE OR REPLACE FUNCTION private.check_plan_model()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_model public.models;
begin
  if new.model is null then
    return new;
  end if;
  select * into v_model from public.models m where m.id = new.model;
  if new.max_output_tokens > v_model.max_output_tokens then
    raise exception 'plan %: max_output_tokens % is above model %''s largest output %',
      new.id, new.max_output_tokens, new.model, v_model.max_output_tokens
      using errcode = '23514', constraint = 'plans_output_within_model';
  end if;
  if new.reasoning_effort is not null and not (new.reasoning_effort = any (v_model.reasoning_efforts)) then
    raise exception 'plan %: model % does not take reasoning effort %',
      new.id, new.model, new.reasoning_effort
      using errcode = '23514', constraint = 'plans_effort_of_model';
  end if;
  return new;
end
$function$;
comment on function private.check_plan_model() is 'A plan naming a model keeps within it: its output bound within the model''s largest output, its reasoning effort one the model takes (23514 otherwise). The tier is the foreign key''s.';

CREATE OR REPLACE FUNCTION private.document_input()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
  if new.input is null and new.kind = 'document' then
    new.input := jsonb_build_object('prompt', new.prompt);
  end if;
  return new;
end
$function$;
comment on function private.document_input() is 'A document row inserted without an input gets {"prompt": prompt}; any other kind must bring its own.';

CREATE OR REPLACE FUNCTION private.drop_output_chunks()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
  delete from public.job_output_chunks c where c.job_id = old.id;
  return null;
end
$function$;
comment on function private.drop_output_chunks() is 'Deletes a job''s output chunks where its partial_output used to be cleared: a new claim, running → queued or succeeded, and retention''s erasure (the trigger''s condition).';

CREATE OR REPLACE FUNCTION private.end_with_refund(p_job public.generation_jobs, p_status text, p_reason text, p_error text, p_event text, p_now timestamp with time zone, p_detail jsonb DEFAULT '{}'::jsonb, p_own integer DEFAULT NULL::integer, p_running_cancel boolean DEFAULT false)
 RETURNS public.generation_jobs
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  -- What the ending attempt consumed: as its worker reports it, else (someone else ends a running
  -- attempt) the prompt and the last progress write, else (queued) nothing.
  -- (A job plan only asks whether it is more than 0: its tokens, with no call.)
  v_own integer := greatest(coalesce(p_own, case when p_job.status <> 'running' then 0
    when p_job.meter = 'jobs' then coalesce(p_job.prompt_tokens, 0) + p_job.partial_tokens
    else private.running_cost(p_job) end), 0);
  v_operator boolean := p_reason is not distinct from 'provider_misconfigured';
  v_paid boolean := not v_operator and (p_running_cancel or p_job.consumed + v_own > 0);
  -- A job plan's refund after spend uses the shared per-period bound.
  v_bounded boolean := p_job.meter = 'jobs' and v_paid;
  v_capture integer := case when v_operator or p_job.meter = 'jobs' then 0
    else least(p_job.consumed + v_own, p_job.hold) end;
  v_refunded boolean;
  v_job public.generation_jobs;
begin
  if p_job.organization_id is null then
    update public.quota_usage q
    set units_used = q.units_used - (p_job.hold - v_capture),
        paid_refunds = q.paid_refunds + case when v_bounded then 1 else 0 end,
        updated_at = p_now
    where q.user_id = p_job.user_id and q.period_start = p_job.period_start
      and q.meter = p_job.meter
      and q.units_used >= p_job.hold - v_capture
      -- The row being updated is the one compared: two endings of one user take turns on it.
      and (not v_bounded or q.paid_refunds < (
        select private.refund_bound(p) from public.plans p where p.id = p_job.plan_id));
    v_refunded := found;
    if not v_refunded and not (v_bounded and exists (
      select from public.quota_usage q
      where q.user_id = p_job.user_id and q.period_start = p_job.period_start
        and q.meter = p_job.meter
    )) then
      -- A hold with no counter to release it to is drift: refuse the whole transition (the
      -- caller sees an error and retries) rather than end the job without its release.
      raise exception 'no hold to release for job % (user %, period %)',
        p_job.id, p_job.user_id, p_job.period_start using errcode = 'P0001';
    end if;
  else
    -- The pool (after the job row, before the member row): the refund after spend is counted
    -- here, under the organization's plan's bound (the job's plan_id is the organization's).
    update public.organization_usage q
    set units_used = q.units_used - (p_job.hold - v_capture),
        paid_refunds = q.paid_refunds + case when v_bounded then 1 else 0 end,
        updated_at = p_now
    where q.organization_id = p_job.organization_id and q.period_start = p_job.period_start
      and q.meter = p_job.meter
      and q.units_used >= p_job.hold - v_capture
      and (not v_bounded or q.paid_refunds < (
        select private.refund_bound(p) from public.plans p where p.id = p_job.plan_id));
    v_refunded := found;
    if not v_refunded and not (v_bounded and exists (
      select from public.organization_usage q
      where q.organization_id = p_job.organization_id and q.period_start = p_job.period_start
        and q.meter = p_job.meter
    )) then
      raise exception 'no hold to release for job % (organization %, period %)',
        p_job.id, p_job.organization_id, p_job.period_start using errcode = 'P0001';
    end if;
    -- The member's row gives back what the pool gave back, no more, no less.
    if v_refunded and p_job.hold > v_capture then
      update public.organization_member_usage u
      set units_used = u.units_used - (p_job.hold - v_capture), updated_at = p_now
      where u.organization_id = p_job.organization_id and u.user_id = p_job.user_id
        and u.period_start = p_job.period_start and u.meter = p_job.meter
        and u.units_used >= p_job.hold - v_capture;
      if not found then
        raise exception 'no member hold to release for job % (organization %, period %)',
          p_job.id, p_job.organization_id, p_job.period_start using errcode = 'P0001';
      end if;
    end if;
  end if;

  update public.generation_jobs j
  set status = p_status,
      failure_reason = case when p_status = 'failed' then p_reason end,
      last_error = coalesce(p_error, j.last_error),
      -- The client was told "nothing was charged, retry": its retry with the same key must
      -- start a job, not replay this one.
      idempotency_key = case when p_reason = 'publish_failed' then null else j.idempotency_key end,
      lease_expires_at = null,
      resume_at = null,
      finished_at = p_now,
      refunded_at = case when v_refunded then p_now end,
      refund_withheld = case when v_refunded then null
        when p_running_cancel then 'running_cancel_limit' else 'paid_refund_limit' end,
      captured = case when v_refunded then v_capture else j.hold end,
      updated_at = p_now
  where j.id = p_job.id and j.status in ('queued', 'running')
  returning * into v_job;
  if not found then
    raise exception 'job % is no longer active', p_job.id using errcode = 'P0001';
  end if;

  insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
  values (v_job.id, v_job.user_id, p_now, p_event, p_job.status, v_job.status,
    p_detail || jsonb_build_object('refunded', v_refunded, 'captured', v_job.captured,
      'released', v_job.hold - v_job.captured)
    || case when v_bounded and v_refunded then jsonb_build_object('counted', true) else '{}'::jsonb end
    || case when v_refunded then '{}'::jsonb
            -- A cancel's event said why in `reason` before; a failure's `reason` is its own.
            when p_status = 'canceled' then jsonb_build_object('reason', v_job.refund_withheld)
            else jsonb_build_object('withheld', v_job.refund_withheld) end);
  return v_job;
end
$function$;
comment on function private.end_with_refund(p_job public.generation_jobs, p_status text, p_reason text, p_error text, p_event text, p_now timestamp with time zone, p_detail jsonb, p_own integer, p_running_cancel boolean) is 'Ends a locked active job failed or canceled. Token plan: captures least(hold, consumed + the ending attempt''s tokens) and releases the rest. Job plan: refunds the unit; after provider spend (consumed, the ending attempt''s tokens, or a running cancel) only under the plan''s bound of refunds after spend, counted, else keeps it (refund_withheld). provider_misconfigured: captures 0, never bounded. An organization job releases on its pool (where the refund after spend is counted, under the organization''s plan''s bound), then the same amount on the member''s row. Raises if the job is no longer active or has no counter.';

CREATE OR REPLACE FUNCTION private.ending_json(j public.generation_jobs)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return pg_catalog.jsonb_build_object(
    'id', j.id, 'user_id', j.user_id, 'status', j.status, 'kind', j.kind, 'plan_id', j.plan_id,
    'meter', j.meter, 'attempts', j.attempts, 'publish_seq', j.publish_seq,
    'failure_reason', j.failure_reason, 'hold', j.hold, 'consumed', j.consumed,
    'captured', j.captured, 'refunded_at', j.refunded_at, 'refund_withheld', j.refund_withheld,
    'finished_at', j.finished_at, 'updated_at', j.updated_at);
end
$function$;
comment on function private.ending_json(j public.generation_jobs) is 'A job as complete_job and fail_job answer an ending: its state (id, user, status, kind, plan, meter, attempts, message seq, failure reason, hold, consumed, captured, refund, times), none of its text.';

CREATE OR REPLACE FUNCTION private.enqueue_in_organization(p_organization_id uuid, p_user_id uuid, p_plan public.plans, p_period_start timestamp with time zone, p_cap integer, p_active integer, p_hold bigint, p_job jsonb, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_result jsonb;
begin
  -- The pool row, then the member row (the lock order); each guarded by its limit, so a race
  -- the reads above did not see is refused by the row that was changed, never overshot.
  with pool as (
    insert into public.organization_usage as q (organization_id, period_start, meter,
      units_used, updated_at)
    values (p_organization_id, p_period_start, p_plan.meter, p_hold, p_now)
    on conflict (organization_id, period_start, meter) do update
      set units_used = q.units_used + p_hold, updated_at = p_now
      where q.units_used + p_hold <= p_plan.units_per_period
    returning q.units_used
  ), member as (
    insert into public.organization_member_usage as u (organization_id, user_id, period_start,
      meter, units_used, updated_at)
    select p_organization_id, p_user_id, p_period_start, p_plan.meter, p_hold, p_now from pool
    on conflict (organization_id, user_id, period_start, meter) do update
      set units_used = u.units_used + p_hold, updated_at = p_now
      where p_cap is null or u.units_used + p_hold <= p_cap
    returning u.units_used
  ), inserted as (
    insert into public.generation_jobs (
      user_id, organization_id, status, kind, prompt, input, request_hash, idempotency_key,
      plan_id, period_start, meter, prompt_tokens, hold, model, service_tier, reasons,
      created_at, queued_at, updated_at
    )
    select p_user_id, p_organization_id, 'queued', p_job ->> 'kind', p_job ->> 'prompt',
      p_job -> 'input', p_job ->> 'hash', p_job ->> 'idempotency_key', p_plan.id,
      p_period_start, p_plan.meter, (p_job ->> 'prompt_tokens')::integer, p_hold,
      p_job ->> 'model', p_plan.service_tier, (p_job ->> 'reasons')::boolean, p_now, p_now, p_now
    from member
    returning *
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select i.id, i.user_id, p_now, 'enqueued', null, i.status,
      jsonb_build_object('plan', p_plan.id, 'kind', i.kind, 'hold', p_hold,
        'organization_id', p_organization_id)
    from inserted i
  )
  select case when i.id is null then null else jsonb_build_object(
    'outcome', 'enqueued',
    'job', to_jsonb(i) - 'request_hash',
    'usage', private.usage_object(p_plan, p_period_start, r.units_used, p_active + 1)
      || jsonb_build_object('meter', p_plan.meter, 'kinds', private.plan_kinds_json(p_plan.id),
        'organization_id', p_organization_id, 'member_used', mu.units_used, 'member_cap', p_cap)
  ) end into v_result
  from pool r left join member mu on true left join inserted i on true;
  if not found then
    -- The pool's guard refused: another member's enqueue took the room since the read above.
    return jsonb_build_object('outcome', 'pool_exhausted', 'hold', p_hold,
      'resets_at', private.period_end(p_plan.period, p_period_start),
      'usage', private.organization_usage_json(p_organization_id, p_user_id, p_plan, p_now));
  end if;
  if v_result is null then
    -- The member's guard refused after the pool was reserved: unreachable under the user's lock
    -- (only this user's enqueues raise their row); refuse the whole call rather than keep a pool
    -- hold with no job.
    raise exception 'enqueue_job: member cap guard refused after the pool reservation'
      using errcode = 'P0001';
  end if;
  return v_result;
end
$function$;
comment on function private.enqueue_in_organization(p_organization_id uuid, p_user_id uuid, p_plan public.plans, p_period_start timestamp with time zone, p_cap integer, p_active integer, p_hold bigint, p_job jsonb, p_now timestamp with time zone) is 'enqueue_job''s organization reservation, under the user''s lock and after its checks: the pool row, then the member row, each guarded by its limit, then the job and its event. The pool''s guard refusing (another member took the room) is pool_exhausted, nothing held.';

CREATE OR REPLACE FUNCTION private.erase_deleted_user()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
begin
  perform private.erase_user_data(old.id, pg_catalog.now());
  return old;
end
$function$;
comment on function private.erase_deleted_user() is 'A user deleted in Supabase Auth (dashboard, admin API, public.erase_user) is erased as DELETE /api/me erases them, in the same transaction as the delete.';

CREATE OR REPLACE FUNCTION private.erase_user_data(p_user_id uuid, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
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
  -- Then the pools of their organization jobs, in (organization, period, meter) order: the only
  -- transaction that holds more than one pool takes them sorted (the lock order).
  perform from public.organization_usage q
  where (q.organization_id, q.period_start, q.meter) in (
    select j.organization_id, j.period_start, j.meter from public.generation_jobs j
    where j.user_id = p_user_id and j.organization_id is not null)
  order by q.organization_id, q.period_start, q.meter
  for update;

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
  perform private.keep_erased_cost(
    array(select j.id from public.generation_jobs j where j.user_id = p_user_id), 'erasure', p_now);

  -- Their organization jobs are all final now: what they captured stays in the pool (the team
  -- paid for it), held there without them.
  update public.organization_usage q
  set erased_units = q.erased_units + s.captured, updated_at = p_now
  from (
    select j.organization_id, j.period_start, j.meter, sum(j.captured) as captured
    from public.generation_jobs j
    where j.user_id = p_user_id and j.organization_id is not null
    group by j.organization_id, j.period_start, j.meter
  ) s
  where q.organization_id = s.organization_id and q.period_start = s.period_start
    and q.meter = s.meter and s.captured > 0;

  perform pg_catalog.set_config('quota_jobs.erasing', 'on', true);
  delete from public.job_events e where e.user_id = p_user_id;
  get diagnostics v_events = row_count;
  -- Their superseded callbacks keep their rows, without the job id (on delete set null).
  delete from public.generation_jobs j where j.user_id = p_user_id;
  get diagnostics v_jobs = row_count;
  perform pg_catalog.set_config('quota_jobs.erasing', 'off', true);
  -- Every job went with its hold or capture, so the counters go too (quota_drift stays empty).
  delete from public.quota_usage q where q.user_id = p_user_id;
  delete from public.organization_member_usage m where m.user_id = p_user_id;
  delete from public.organization_members m where m.user_id = p_user_id;
  delete from public.user_plans p where p.user_id = p_user_id;
  -- A pseudonym in a kept log line now names no one.
  delete from private.user_pseudonyms s where s.user_id = p_user_id;

  return jsonb_build_object('outcome', 'erased', 'jobs', v_jobs, 'canceled', v_canceled,
    'events', v_events);
end
$function$;
comment on function private.erase_user_data(p_user_id uuid, p_now timestamp with time zone) is 'A user''s erasure: cancels their active jobs (cancel_job''s refund rule), adds their jobs'' cost to public.erased_usage (no user) and their organization jobs'' captures to their pools'' erased_units, deletes their job_events, generation_jobs (their superseded_callbacks rows keep no job id), quota_usage, organization_member_usage, organization_members, user_plans and user_pseudonyms rows. Serialized per user with enqueue (its advisory lock); locks their jobs, then their pools in order. A second call finds nothing and erases 0. Security definer: deleting events is allowed only to the owner (private.erasing).';

CREATE OR REPLACE FUNCTION private.erasing(p_table regclass)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  select coalesce(current_setting('quota_jobs.erasing', true), '') = 'on'
    and exists (select from pg_catalog.pg_class c
                where c.oid = p_table and c.relowner = current_user::regrole::oid)
$function$;
comment on function private.erasing(p_table regclass) is 'Whether the current statement is an erasure: the transaction-local quota_jobs.erasing is on and it runs as the owner of p_table (inside private.erase_user_data or public.retention_batch, security definer). Anyone else setting the flag is still refused.';

CREATE OR REPLACE FUNCTION private.events_complete_since()
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  select h.events_complete_since from private.history_horizon h
$function$;
comment on function private.events_complete_since() is 'Events at or after this instant are all kept; a job created (or a period started) before it may have lost some to the retention.';

CREATE OR REPLACE FUNCTION private.forbid_changing_events()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
  -- The erasure of a user deletes their events; nothing ever updates one.
  if tg_op = 'DELETE' and private.erasing('public.job_events'::regclass) then
    return old;
  end if;
  raise exception 'job_events is append-only' using errcode = 'P0001';
end
$function$;
comment on function private.forbid_changing_events() is 'Keeps job_events append-only; the one exception is a user''s erasure deleting their events (private.erasing).';

CREATE OR REPLACE FUNCTION private.forbid_changing_final_jobs()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
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
$function$;
comment on function private.forbid_changing_final_jobs() is 'A final job never changes again: no second refund, no completion over a cancel, whatever the caller. The one exception is retention erasing its text, and nothing else (private.erasing).';

CREATE OR REPLACE FUNCTION private.forget_invitations_to()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
begin
  if old.email is not null then
    delete from public.organization_invitations i
    where i.email = lower(old.email) and i.accepted_at is null;
  end if;
  return old;
end
$function$;
comment on function private.forget_invitations_to() is 'After a user''s deletion: the pending invitations to their address go (personal data). Security definer: Auth deletes users as its own role.';

CREATE OR REPLACE FUNCTION private.generation_job_valid(j public.generation_jobs)
 RETURNS boolean
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
declare
  v_failed text;
begin
  -- One branch per former constraint, in name order; a null rule passes, as a CHECK's does.
  v_failed := case
    when (j.attempts >= 0) is false then 'generation_jobs_attempts_check'
    when (j.captured >= 0) is false then 'generation_jobs_captured_check'
    when ((j.status in ('succeeded', 'failed', 'canceled')) = (j.captured is not null)) is false
      then 'generation_jobs_captured_iff_final'
    when (j.captured is null or j.captured <= j.hold) is false
      then 'generation_jobs_captured_within_hold'
    when (j.consumed >= 0) is false then 'generation_jobs_consumed_check'
    when (j.erased_at is null or j.finished_at is not null and j.prompt = '' and j.input = '{}'
        and j.output is null and j.partial_output is null and j.last_error is null
        and j.idempotency_key is null and j.request_hash = '') is false
      then 'generation_jobs_erased_is_empty'
    when (j.failure_reason in ('model_refused', 'delivery_failed', 'publish_failed',
        'provider_quota_exhausted', 'lease_expired', 'max_age_exceeded', 'never_delivered',
        'attempt_budget_exhausted', 'provider_misconfigured', 'capacity_unavailable',
        'output_invalid', 'output_truncated')) is false
      then 'generation_jobs_failure_reason_check'
    when ((j.status in ('succeeded', 'failed', 'canceled')) = (j.finished_at is not null)) is false
      then 'generation_jobs_finished_iff_terminal'
    when (j.hold >= 1) is false then 'generation_jobs_hold_check'
    when (pg_catalog.char_length(j.idempotency_key) between 1 and 255) is false
      then 'generation_jobs_idempotency_key_check'
    when (pg_catalog.jsonb_typeof(j.input) = 'object') is false
      then 'generation_jobs_input_is_object'
    when ((j.status = 'running') = (j.lease_expires_at is not null)) is false
      then 'generation_jobs_lease_iff_running'
    when (j.meter in ('jobs', 'tokens', 'money')) is false then 'generation_jobs_meter_check'
    when (j.output is null or j.status = 'succeeded') is false
      then 'generation_jobs_output_only_when_succeeded'
    when (j.partial_output is null) is false then 'generation_jobs_partial_output_in_chunks'
    when (j.partial_tokens >= 0) is false then 'generation_jobs_partial_tokens_check'
    when (pg_catalog.char_length(j.prompt) <= 8000
        and (pg_catalog.char_length(j.prompt) >= 1 or j.erased_at is not null)) is false
      then 'generation_jobs_prompt_check'
    when (j.prompt_tokens >= 0) is false then 'generation_jobs_prompt_tokens_check'
    when (j.provider_quota_hits >= 0) is false then 'generation_jobs_provider_quota_hits_check'
    when (j.publish_seq >= 1) is false then 'generation_jobs_publish_seq_check'
    when ((j.status = 'failed') = (j.failure_reason is not null)) is false
      then 'generation_jobs_reason_iff_failed'
    when (j.reasoning_tokens >= 0) is false then 'generation_jobs_reasoning_tokens_check'
    when (j.refund_withheld in ('running_cancel_limit', 'paid_refund_limit')) is false
      then 'generation_jobs_refund_withheld_check'
    when ((j.status in ('failed', 'canceled'))
        = ((j.refunded_at is not null) <> (j.refund_withheld is not null))) is false
      then 'generation_jobs_refunded_iff_failed_or_canceled'
    when (j.republish_count >= 0) is false then 'generation_jobs_republish_count_check'
    when (j.resume_at is null or j.status = 'queued') is false
      then 'generation_jobs_resume_only_when_queued'
    when (j.refund_withheld is distinct from 'running_cancel_limit' or j.status = 'canceled')
        is false
      then 'generation_jobs_running_cancel_limit_only_when_canceled'
    when (j.status in ('queued', 'running', 'succeeded', 'failed', 'canceled')) is false
      then 'generation_jobs_status_check'
    when (j.waiting_for in ('provider', 'capacity')) is false then 'generation_jobs_waiting_for_check'
    when (j.refund_withheld is null or j.status in ('failed', 'canceled')) is false
      then 'generation_jobs_withheld_only_when_failed_or_canceled'
  end;
  if v_failed is not null then
    raise exception 'new row for relation "generation_jobs" violates check constraint "%"', v_failed
      using errcode = 'check_violation', constraint = v_failed, schema = 'public',
        table = 'generation_jobs';
  end if;
  return true;
end
$function$;
comment on function private.generation_job_valid(j public.generation_jobs) is 'The rules of a job row (public.generation_jobs'' one check, generation_jobs_valid): true, or check_violation (23514) naming the rule broken, under the name each rule had as a constraint of its own (e.g. generation_jobs_failure_reason_check). One function, so a write compiles one call instead of 30 expressions.';

CREATE OR REPLACE FUNCTION private.held_prices(p_model text, p_tier text)
 RETURNS TABLE(input_per_mtok bigint, cached_input_per_mtok bigint, output_per_mtok bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return query
  select max(t.input_per_mtok), max(t.cached_input_per_mtok), max(t.output_per_mtok)
  from public.model_tiers t
  where t.model_id = p_model and t.tier in (coalesce(p_tier, 'default'), 'default')
  having count(*) > 0;
end
$function$;
comment on function private.held_prices(p_model text, p_tier text) is 'The prices a money hold is made at: per kind of token, the dearer of the tier''s and the standard tier''s (a flex request may be served at standard). No row: the model is not priced.';

CREATE OR REPLACE FUNCTION private.job_events_month_partition(p_month timestamp with time zone)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
 SET "TimeZone" TO 'UTC'
AS $function$
declare
  v_from timestamptz := date_trunc('month', p_month);
  v_to timestamptz := date_trunc('month', p_month) + interval '1 month';
  v_name text := 'job_events_' || to_char(date_trunc('month', p_month), 'YYYY_MM');
  v_in_default boolean;
begin
  if to_regclass('private.' || v_name) is not null then
    return null;
  end if;
  select exists (select 1 from private.job_events_default d where d.at >= v_from and d.at < v_to)
    into v_in_default;
  if not v_in_default then
    execute format('create table private.%I partition of public.job_events for values from (%L) to (%L)',
      v_name, v_from, v_to);
  else
    -- Creating the partition would fail while the default holds rows of its range. The rows
    -- move, unchanged (same id, same at), with the default detached: a detached partition has
    -- no clone of the append-only trigger, and nothing reads it in the meantime (this
    -- transaction holds the table's lock until it ends).
    alter table public.job_events detach partition private.job_events_default;
    execute format('create table private.%I partition of public.job_events for values from (%L) to (%L)',
      v_name, v_from, v_to);
    insert into public.job_events overriding system value
      select * from private.job_events_default d where d.at >= v_from and d.at < v_to;
    delete from private.job_events_default d where d.at >= v_from and d.at < v_to;
    alter table public.job_events attach partition private.job_events_default default;
  end if;
  execute format('comment on table private.%I is %L', v_name,
    'Events of ' || to_char(v_from, 'YYYY-MM') || ' (UTC), a partition of public.job_events.');
  -- Read and written through public.job_events only (its policy and grants), never directly.
  execute format('revoke all on table private.%I from public, anon, authenticated, service_role', v_name);
  return v_name;
end
$function$;
comment on function private.job_events_month_partition(p_month timestamp with time zone) is 'Creates the partition of job_events for the UTC month of p_month, moving in any rows the default partition holds for it; its name, or null when it existed.';

CREATE OR REPLACE FUNCTION private.job_json(j public.generation_jobs)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  if j.status in ('running', 'failed', 'canceled') then
    return (pg_catalog.to_jsonb(j) - 'request_hash')
      || pg_catalog.jsonb_build_object('partial_output', private.partial_output(j));
  end if;
  return pg_catalog.to_jsonb(j) - 'request_hash';
end
$function$;
comment on function private.job_json(j public.generation_jobs) is 'A job as the functions return it: every column but the prompt hash, partial_output read from public.job_output_chunks.';

CREATE OR REPLACE FUNCTION private.keep_erased_cost(p_jobs uuid[], p_canceled_by text, p_now timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
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
    cross join lateral (
      select
        coalesce(sum(greatest(coalesce((e.detail -> 'usage' ->> 'prompt_tokens')::bigint, 0), 0)), 0)
          as prompt_tokens,
        coalesce(sum(greatest(coalesce((e.detail -> 'usage' ->> 'completion_tokens')::bigint, 0), 0)), 0)
          as completion_tokens
      from public.job_events e where e.job_id = j.id and e.detail ? 'usage'
    ) b
    -- A running attempt this erasure canceled reported no usage: counted as the cancel charged
    -- it (its prompt and last recorded progress).
    cross join lateral (
      select exists (select from public.job_events x
        where x.job_id = j.id and x.event = 'canceled' and x.from_status = 'running'
          and x.detail ->> 'by' = p_canceled_by) as canceled
    ) c
    where j.id = any(p_jobs)
  ) t
  group by t.period_start, t.plan_id, t.kind, t.meter
  on conflict (period_start, plan_id, kind, meter) do update
    set jobs = u.jobs + excluded.jobs,
        captured = u.captured + excluded.captured,
        consumed = u.consumed + excluded.consumed,
        prompt_tokens = u.prompt_tokens + excluded.prompt_tokens,
        completion_tokens = u.completion_tokens + excluded.completion_tokens,
        updated_at = p_now;
end
$function$;
comment on function private.keep_erased_cost(p_jobs uuid[], p_canceled_by text, p_now timestamp with time zone) is 'Adds the cost of jobs p_jobs (about to be deleted) to public.erased_usage: their attempts'' reported usage, and what a cancel by p_canceled_by charged a running attempt. Called by private.erase_user_data and public.delete_organization.';

CREATE OR REPLACE FUNCTION private.log_event(p_job public.generation_jobs, p_event text, p_from_status text, p_now timestamp with time zone, p_detail jsonb DEFAULT '{}'::jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
  insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
  values (p_job.id, p_job.user_id, p_now, p_event, p_from_status, p_job.status, p_detail);
end
$function$;
comment on function private.log_event(p_job public.generation_jobs, p_event text, p_from_status text, p_now timestamp with time zone, p_detail jsonb) is 'Appends one transition to job_events.';

CREATE OR REPLACE FUNCTION private.managed_organizations()
 RETURNS SETOF uuid
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$
  select m.organization_id from public.organization_members m
  where m.user_id = (select auth.uid()) and m.role in ('owner', 'admin')
$function$;
comment on function private.managed_organizations() is 'The organizations the signed-in user is an owner or admin of, for the row level security policies (security definer: a policy on organization_members cannot read that table itself).';

CREATE OR REPLACE FUNCTION private.member_json(p_organization_id uuid, p_user_id uuid, p_start timestamp with time zone, p_meter text)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  select jsonb_build_object('user_id', m.user_id, 'email', private.user_email(m.user_id),
    'role', m.role,
    'cap', m.cap, 'joined_at', m.created_at,
    'used', coalesce(mu.units_used, 0),
    'active', (select count(*) from public.generation_jobs j
      where j.user_id = m.user_id and j.organization_id = m.organization_id
        and j.status in ('queued', 'running')))
  from public.organization_members m
  left join public.organization_member_usage mu on mu.organization_id = m.organization_id
    and mu.user_id = m.user_id and mu.period_start = p_start and mu.meter = p_meter
  where m.organization_id = p_organization_id and m.user_id = p_user_id
$function$;
comment on function private.member_json(p_organization_id uuid, p_user_id uuid, p_start timestamp with time zone, p_meter text) is 'One member as an owner or admin sees them: address, role, cap, what they hold and captured in the period (used) and their active jobs'' count. No job, prompt or output.';

CREATE OR REPLACE FUNCTION private.offer_documents()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
  insert into public.plan_kinds (plan_id, kind, units) values (new.id, 'document', 1)
  on conflict (plan_id, kind) do nothing;
  return null;
end
$function$;
comment on function private.offer_documents() is 'A new plan offers documents at 1 unit, as every plan did before kinds: a plan inserted as before (seed, operator, tests) keeps working. Delete its row to make a plan without them.';

CREATE OR REPLACE FUNCTION private.open_periods_since(p_now timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  select private.period_start('month', least(p_now, (
    select min(j.created_at) from public.generation_jobs j
    where j.status in ('queued', 'running'))))
$function$;
comment on function private.open_periods_since(p_now timestamp with time zone) is 'The start of the oldest quota period that can still change at p_now: the UTC month of p_now or of the oldest active job''s created_at, whichever is earlier. Earlier periods are closed and all their jobs final.';

CREATE OR REPLACE FUNCTION private.ops_buckets(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval)
 RETURNS TABLE(bucket timestamp with time zone)
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  -- Bounded: a caller cannot ask for a million buckets (or none, or a negative step).
  if p_bucket is null or p_bucket <= interval '0' or p_from is null or p_to is null
    or p_to <= p_from
    or extract(epoch from p_to - p_from) / extract(epoch from p_bucket) > 1000 then
    raise exception 'ops: bad window % to % by %', p_from, p_to, p_bucket using errcode = '22023';
  end if;
  return query select g from pg_catalog.generate_series(p_from, p_to - interval '1 microsecond', p_bucket) g;
end
$function$;
comment on function private.ops_buckets(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval) is 'The buckets of an operator-page window: p_from, p_from + p_bucket, … before p_to (at most 1000; else 22023). Every series has a row per bucket, zeros included.';

CREATE OR REPLACE FUNCTION private.organization_usage_json(p_organization_id uuid, p_user_id uuid, p_plan public.plans, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
declare
  v_start timestamptz := private.period_start(p_plan.period, p_now);
begin
  return (
  select private.usage_object(p_plan, v_start, coalesce(q.units_used, 0), a.n)
    || jsonb_build_object(
      'meter', p_plan.meter,
      'held', a.held,
      'paid_refunds', case when p_plan.meter = 'jobs' then coalesce(q.paid_refunds, 0) end,
      'max_paid_refunds', private.refund_bound(p_plan),
      'kinds', private.plan_kinds_json(p_plan.id),
      'organization_id', p_organization_id,
      'member_used', coalesce((select u.units_used from public.organization_member_usage u
        where u.organization_id = p_organization_id and u.user_id = p_user_id
          and u.period_start = v_start and u.meter = p_plan.meter), 0),
      'member_cap', (select m.cap from public.organization_members m
        where m.organization_id = p_organization_id and m.user_id = p_user_id))
  from (select count(*) as n, coalesce(sum(j.hold), 0) as held from public.generation_jobs j
        where j.user_id = p_user_id and j.organization_id = p_organization_id
          and j.status in ('queued', 'running')) a
  left join public.organization_usage q on q.organization_id = p_organization_id
    and q.period_start = v_start and q.meter = p_plan.meter
  );
end
$function$;
comment on function private.organization_usage_json(p_organization_id uuid, p_user_id uuid, p_plan public.plans, p_now timestamp with time zone) is 'A member''s usage in an organization in the period that contains p_now, in usage_json''s shape: used and limit are the pool''s; held and active the member''s jobs there; member_used and member_cap their row and cap.';

CREATE OR REPLACE FUNCTION private.partial_output(j public.generation_jobs)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return (select pg_catalog.string_agg(c.text, '' order by c.end_char)
          from public.job_output_chunks c
          where c.job_id = j.id and c.attempt = j.attempts);
end
$function$;
comment on function private.partial_output(j public.generation_jobs) is 'The job''s current attempt''s text so far (its chunks in order); null before its first progress write, and once the chunks are gone.';

CREATE OR REPLACE FUNCTION private.period_end(p_period text, p_start timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  return ((p_start at time zone 'UTC') + ('1 ' || p_period)::interval) at time zone 'UTC';
end
$function$;
comment on function private.period_end(p_period text, p_start timestamp with time zone) is 'When the period that starts at p_start resets.';

CREATE OR REPLACE FUNCTION private.period_start(p_period text, p_now timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  return date_trunc(p_period, p_now at time zone 'UTC') at time zone 'UTC';
end
$function$;
comment on function private.period_start(p_period text, p_now timestamp with time zone) is 'Start of the UTC day or month that contains p_now (independent of the session time zone).';

CREATE OR REPLACE FUNCTION private.plan_for(p_user_id uuid)
 RETURNS public.plans
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$
declare
  v_plan public.plans;
  v_plan_id text;
begin
  select up.plan_id into v_plan_id from public.user_plans up where up.user_id = p_user_id;
  if v_plan_id is null then
    if exists (select 1 from auth.users u where u.id = p_user_id and u.is_anonymous) then
      v_plan_id := coalesce(
        (select p.id from public.plans p where p.for_anonymous_users),
        'none'
      );
    else
      v_plan_id := 'free';
    end if;
  end if;
  select p.* into v_plan from public.plans p where p.id = v_plan_id;
  return v_plan;
end
$function$;
comment on function private.plan_for(p_user_id uuid) is 'The plan a user is on: their user_plans row; else, for an anonymous sign-in, the plan marked for_anonymous_users or ''none'' (no units); else free.';

CREATE OR REPLACE FUNCTION private.plan_kinds_json(p_plan_id text)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return (
  select coalesce(jsonb_agg(jsonb_build_object('kind', k.kind, 'units', k.units)
    order by k.units, k.kind), '[]'::jsonb)
  from public.plan_kinds k where k.plan_id = p_plan_id
  );
end
$function$;
comment on function private.plan_kinds_json(p_plan_id text) is 'The kinds a plan offers and their units, cheapest first: [{"kind", "units"}].';

CREATE OR REPLACE FUNCTION private.queued_due_since(j public.generation_jobs)
 RETURNS timestamp with time zone
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  select coalesce(j.resume_at, j.queued_at)
$function$;
comment on function private.queued_due_since(j public.generation_jobs) is 'Since when a queued job should have been delivered: its resume time after a provider 429, else when it was (re)queued. The generation_jobs_queued_since index is on this expression. Inlined by the planner, hence no search_path setting (see its migration).';

CREATE OR REPLACE FUNCTION private.quota_drift_since(p_since timestamp with time zone)
 RETURNS TABLE(user_id uuid, period_start timestamp with time zone, units_used integer, units_expected bigint, meter text, organization_id uuid)
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  with reserved as (
    select j.user_id, j.period_start, j.meter, sum(coalesce(j.captured, j.hold)) as units_expected
    from public.generation_jobs j
    where j.period_start >= p_since and j.organization_id is null
    group by j.user_id, j.period_start, j.meter
  ), used as (
    select u.user_id, u.period_start, u.meter, u.units_used
    from public.quota_usage u
    where u.period_start >= p_since
  ), org_jobs as (
    select j.organization_id, j.user_id, j.period_start, j.meter,
      sum(coalesce(j.captured, j.hold)) as units_expected
    from public.generation_jobs j
    where j.organization_id is not null and j.period_start >= p_since
    group by j.organization_id, j.user_id, j.period_start, j.meter
  ), pool_reserved as (
    select o.organization_id, o.period_start, o.meter, sum(o.units_expected) as units_expected
    from org_jobs o group by o.organization_id, o.period_start, o.meter
  ), pools as (
    select q.organization_id, q.period_start, q.meter, q.units_used, q.erased_units
    from public.organization_usage q where q.period_start >= p_since
  ), members as (
    select m.organization_id, m.user_id, m.period_start, m.meter, m.units_used
    from public.organization_member_usage m where m.period_start >= p_since
  )
  select
    coalesce(u.user_id, r.user_id),
    coalesce(u.period_start, r.period_start),
    coalesce(u.units_used, 0),
    coalesce(r.units_expected, 0)::bigint,
    coalesce(u.meter, r.meter),
    null::uuid
  from used u
  full join reserved r
    on r.user_id = u.user_id and r.period_start = u.period_start and r.meter = u.meter
  where coalesce(u.units_used, 0) <> coalesce(r.units_expected, 0)
  union all
  -- A pool: its jobs' holds and captures, plus what erased members' jobs captured.
  select null::uuid, coalesce(p.period_start, r.period_start), coalesce(p.units_used, 0),
    (coalesce(r.units_expected, 0) + coalesce(p.erased_units, 0))::bigint,
    coalesce(p.meter, r.meter), coalesce(p.organization_id, r.organization_id)
  from pools p
  full join pool_reserved r on r.organization_id = p.organization_id
    and r.period_start = p.period_start and r.meter = p.meter
  where coalesce(p.units_used, 0) <> coalesce(r.units_expected, 0) + coalesce(p.erased_units, 0)
  union all
  -- A member in an organization: their jobs there.
  select coalesce(m.user_id, o.user_id), coalesce(m.period_start, o.period_start),
    coalesce(m.units_used, 0), coalesce(o.units_expected, 0)::bigint, coalesce(m.meter, o.meter),
    coalesce(m.organization_id, o.organization_id)
  from members m
  full join org_jobs o on o.organization_id = m.organization_id and o.user_id = m.user_id
    and o.period_start = m.period_start and o.meter = m.meter
  where coalesce(m.units_used, 0) <> coalesce(o.units_expected, 0)
$function$;
comment on function private.quota_drift_since(p_since timestamp with time zone) is 'quota_drift''s rows for the periods that start at or after p_since (-infinity: all of them, the view): users (organization_id null), organization pools (user_id null; erased members'' captures count) and members in an organization (both set).';

CREATE OR REPLACE FUNCTION private.refund(p_job public.generation_jobs, p_now timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
  update public.quota_usage q
  set units_used = q.units_used - 1, updated_at = p_now
  where q.user_id = p_job.user_id and q.period_start = p_job.period_start and q.units_used > 0;
  if not found then
    -- A reserved unit with no counter to return it to is drift: refuse the whole transition
    -- (the caller sees an error and retries) rather than end the job without its refund.
    raise exception 'no reserved unit to refund for job % (user %, period %)',
      p_job.id, p_job.user_id, p_job.period_start using errcode = 'P0001';
  end if;
end
$function$;
comment on function private.refund(p_job public.generation_jobs, p_now timestamp with time zone) is 'Returns a job''s unit to the period it was reserved from. Called only by transitions that have just ended the job failed or canceled, in the same transaction.';

CREATE OR REPLACE FUNCTION private.refund_bound(p_plan public.plans)
 RETURNS integer
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  return case when p_plan.meter = 'jobs'
    then coalesce(p_plan.max_paid_refunds, p_plan.units_per_period) end;
end
$function$;
comment on function private.refund_bound(p_plan public.plans) is 'How many refunds after provider spend (running cancels, failures and queued cancels after a consumed attempt) the plan gives per period: max_paid_refunds, else units_per_period. Null on a token plan, which has no such bound (an ending captures what was consumed). A refund after spend is made while the period''s quota_usage.paid_refunds is under it.';

CREATE OR REPLACE FUNCTION private.running_cost(p_job public.generation_jobs)
 RETURNS integer
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return private.attempt_cost(p_job, coalesce(p_job.prompt_tokens, 0), 0, p_job.partial_tokens,
    null, false);
end
$function$;
comment on function private.running_cost(p_job public.generation_jobs) is 'What the running attempt cost so far as SQL knows it (its prompt and last progress write), for an ending or a reclaim by someone else than its worker.';

CREATE OR REPLACE FUNCTION private.stale_lease_expired(j public.generation_jobs, p_now timestamp with time zone, p_lease_grace_seconds integer)
 RETURNS boolean
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
  select j.status = 'running'
    and j.lease_expires_at < p_now - pg_catalog.make_interval(secs => p_lease_grace_seconds)
$function$;
comment on function private.stale_lease_expired(j public.generation_jobs, p_now timestamp with time zone, p_lease_grace_seconds integer) is 'Stale: a running job whose lease expired more than the grace before p_now, its worker dead (the sweeper fails it lease_expired; reconcile reports running_lease_expired). Index: generation_jobs_running_lease, walked by lease_expires_at. Inlined by the planner, hence no search_path setting (see its migration).';

CREATE OR REPLACE FUNCTION private.stale_past_max_age(j public.generation_jobs, p_now timestamp with time zone, p_max_age_seconds integer)
 RETURNS boolean
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
  select j.status in ('queued', 'running')
    and j.created_at < p_now - pg_catalog.make_interval(secs => p_max_age_seconds)
$function$;
comment on function private.stale_past_max_age(j public.generation_jobs, p_now timestamp with time zone, p_max_age_seconds integer) is 'Stale: an active job created more than the max age before p_now (the sweeper fails it max_age_exceeded; reconcile reports active_past_max_age). Index: generation_jobs_active_created, walked by created_at. Inlined by the planner, hence no search_path setting (see its migration).';

CREATE OR REPLACE FUNCTION private.stale_undelivered(j public.generation_jobs, p_now timestamp with time zone, p_undelivered_after_seconds integer)
 RETURNS boolean
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
  select j.status = 'queued'
    and private.queued_due_since(j)
      < p_now - pg_catalog.make_interval(secs => p_undelivered_after_seconds)
$function$;
comment on function private.stale_undelivered(j public.generation_jobs, p_now timestamp with time zone, p_undelivered_after_seconds integer) is 'Stale: a queued job not delivered within the window after it was due, its message lost (the sweeper republishes it once, then fails it never_delivered; reconcile reports queued_never_delivered). Index: generation_jobs_queued_since, walked by private.queued_due_since. Inlined by the planner, hence no search_path setting (see its migration).';

CREATE OR REPLACE FUNCTION private.sweep_one(p_old public.generation_jobs, p_reason text, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_job public.generation_jobs;
begin
  if p_reason = 'republish' then
    update public.generation_jobs j
    set republish_count = j.republish_count + 1,
        publish_seq = j.publish_seq + 1,
        queued_at = p_now,
        resume_at = null,
        updated_at = p_now
    where j.id = p_old.id
    returning * into v_job;
    perform private.log_event(v_job, 'republished', 'queued', p_now,
      jsonb_build_object('republish_count', v_job.republish_count));
    return jsonb_build_object('republish', private.job_json(v_job));
  end if;
  v_job := private.end_with_refund(p_old, 'failed', p_reason, 'ended by the sweeper', 'swept', p_now,
    jsonb_build_object('reason', p_reason));
  return jsonb_build_object('failed', jsonb_build_object(
    'id', v_job.id, 'user_id', v_job.user_id, 'reason', p_reason, 'from_status', p_old.status));
end
$function$;
comment on function private.sweep_one(p_old public.generation_jobs, p_reason text, p_now timestamp with time zone) is 'One locked stale job: republished (queued, message lost) or failed (private.end_with_refund''s rule).';

CREATE OR REPLACE FUNCTION private.usage_cost(p_job public.generation_jobs, p_usage jsonb)
 RETURNS integer
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  if p_usage is null then
    return 0;
  end if;
  return private.attempt_cost(p_job,
    coalesce((p_usage ->> 'prompt_tokens')::integer, 0),
    coalesce((p_usage ->> 'cached_tokens')::integer, 0),
    coalesce((p_usage ->> 'completion_tokens')::integer, 0),
    p_usage ->> 'service_tier',
    coalesce(p_usage ->> 'source' = 'provider', false));
end
$function$;
comment on function private.usage_cost(p_job public.generation_jobs, p_usage jsonb) is 'private.attempt_cost of an attempt''s usage {"prompt_tokens", "completion_tokens", "cached_tokens", "service_tier", "source"} (0 without one).';

CREATE OR REPLACE FUNCTION private.usage_json(p_user_id uuid, p_plan public.plans, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return (
  with bounds as (
    select private.period_start(p_plan.period, p_now) as period_start
  ), counter as (
    select q.units_used, q.paid_refunds from public.quota_usage q, bounds b
    where q.user_id = p_user_id and q.period_start = b.period_start and q.meter = p_plan.meter
  ), active as (
    select count(*) as n, coalesce(sum(j.hold), 0) as held from public.generation_jobs j
    where j.user_id = p_user_id and j.status in ('queued', 'running')
      and j.organization_id is null
  )
  select private.usage_object(
    p_plan,
    b.period_start,
    coalesce((select c.units_used from counter c), 0),
    a.n
  ) || jsonb_build_object(
    'meter', p_plan.meter,
    'held', a.held,
    -- A token plan has no bound of refunds: a cancel or a failure pays what it consumed.
    'paid_refunds', case when p_plan.meter = 'jobs'
      then coalesce((select c.paid_refunds from counter c), 0) end,
    'max_paid_refunds', private.refund_bound(p_plan),
    'kinds', private.plan_kinds_json(p_plan.id)
  )
  from bounds b, active a
  );
end
$function$;
comment on function private.usage_json(p_user_id uuid, p_plan public.plans, p_now timestamp with time zone) is 'A user''s usage in the period that contains p_now: the meter, units (jobs or tokens) used on that meter''s counter and the limit, what active jobs hold, active jobs, (job plans) the refunds after spend used and allowed (paid_refunds, max_paid_refunds), null for both on a token plan, and the kinds the plan offers.';

CREATE OR REPLACE FUNCTION private.usage_object(p_plan public.plans, p_period_start timestamp with time zone, p_used integer, p_active bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  return jsonb_build_object(
    'plan', p_plan.id,
    'used', p_used,
    'limit', p_plan.units_per_period,
    'period_start', p_period_start,
    'resets_at', private.period_end(p_plan.period, p_period_start),
    'active', p_active,
    'max_active', p_plan.max_active_jobs
  );
end
$function$;
comment on function private.usage_object(p_plan public.plans, p_period_start timestamp with time zone, p_used integer, p_active bigint) is 'A usage report from values the caller already holds (enqueue knows them: no second read).';

CREATE OR REPLACE FUNCTION private.usage_tokens(p_usage jsonb)
 RETURNS integer
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  return case when p_usage is null then 0 else
    greatest(coalesce((p_usage ->> 'prompt_tokens')::integer, 0), 0)
    + greatest(coalesce((p_usage ->> 'completion_tokens')::integer, 0), 0) end;
end
$function$;
comment on function private.usage_tokens(p_usage jsonb) is 'prompt_tokens + completion_tokens of an attempt''s usage (0 without one).';

CREATE OR REPLACE FUNCTION private.user_email(p_user_id uuid)
 RETURNS text
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$
  select lower(u.email) from auth.users u where u.id = p_user_id
$function$;
comment on function private.user_email(p_user_id uuid) is 'A user''s address as Auth has it, lower case (null: none, or no such user). Security definer: auth.users is Auth''s table, not granted to the service role.';

CREATE OR REPLACE FUNCTION private.user_exists(p_user_id uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
begin
  perform pg_catalog.pg_advisory_xact_lock(
    pg_catalog.hashtextextended('quota_jobs.enqueue:' || p_user_id::text, 0));
  return exists (select from auth.users u where u.id = p_user_id);
end
$function$;
comment on function private.user_exists(p_user_id uuid) is 'Whether Supabase Auth knows the user (an auth.users row). A valid token outlives its user. Takes the user''s enqueue lock first, so an erasure (which holds it) is seen once committed: enqueue cannot create a job for a user erased while it waited.';

CREATE OR REPLACE FUNCTION private.with_usage(p_detail jsonb, p_usage jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  return case when p_usage is null then p_detail else p_detail || jsonb_build_object('usage', p_usage) end;
end
$function$;
comment on function private.with_usage(p_detail jsonb, p_usage jsonb) is 'An event detail with the attempt''s usage added under `usage` (unchanged without one).';

CREATE OR REPLACE FUNCTION public.accept_invitation(p_token text, p_user_id uuid, p_now timestamp with time zone DEFAULT now())
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_inv public.organization_invitations;
  v_email text;
begin
  v_email := private.user_email(p_user_id);
  if not private.user_exists(p_user_id) then
    return jsonb_build_object('outcome', 'user_not_found');
  end if;
  select * into v_inv from public.organization_invitations i
  where i.token_hash = encode(sha256(convert_to(coalesce(p_token, ''), 'UTF8')), 'hex')
  for update;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  if v_inv.accepted_at is not null then
    return jsonb_build_object('outcome', 'already_accepted');
  end if;
  if v_inv.expires_at <= p_now then
    return jsonb_build_object('outcome', 'expired');
  end if;
  if v_inv.email is not null and v_inv.email is distinct from v_email then
    return jsonb_build_object('outcome', 'wrong_recipient');
  end if;
  if exists (select from public.organization_members m
      where m.organization_id = v_inv.organization_id and m.user_id = p_user_id) then
    return jsonb_build_object('outcome', 'already_member',
      'organization_id', v_inv.organization_id);
  end if;
  insert into public.organization_members (organization_id, user_id, role, cap, created_at)
  values (v_inv.organization_id, p_user_id, v_inv.role, v_inv.cap, p_now);
  update public.organization_invitations i
  set accepted_at = p_now, accepted_by = p_user_id, email = null
  where i.id = v_inv.id;
  return jsonb_build_object('outcome', 'accepted', 'organization_id', v_inv.organization_id,
    'role', v_inv.role, 'cap', v_inv.cap);
end
$function$;
comment on function public.accept_invitation(p_token text, p_user_id uuid, p_now timestamp with time zone) is 'Joins the user (else user_not_found) to the invitation''s organization with its role and cap: once (already_accepted after), before it expires (expired), only the user whose address the invitation names (wrong_recipient), not twice (already_member, the invitation kept). The invitation row is locked: concurrent accepts of one token make one member. not_found for a token no invitation has.';

CREATE OR REPLACE FUNCTION public.cancel_job(p_job_id uuid, p_user_id uuid, p_now timestamp with time zone DEFAULT now())
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_old public.generation_jobs;
  v_job public.generation_jobs;
begin
  select * into v_old from public.generation_jobs j
  where j.id = p_job_id and j.user_id = p_user_id
  for update;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  if v_old.status in ('succeeded', 'failed', 'canceled') then
    return jsonb_build_object('outcome', 'already_finished', 'job', private.job_json(v_old));
  end if;
  -- Queued: what its earlier attempts consumed. Running: also the running attempt as last
  -- recorded; on a job plan a running cancel is always after spend.
  v_job := private.end_with_refund(v_old, 'canceled', null, null, 'canceled', p_now, '{}'::jsonb,
    null, v_old.status = 'running');
  return jsonb_build_object('outcome', 'canceled', 'refunded', v_job.refunded_at is not null,
    'job', private.job_json(v_job));
end
$function$;
comment on function public.cancel_job(p_job_id uuid, p_user_id uuid, p_now timestamp with time zone) is 'The owner cancels a queued or running job (private.end_with_refund''s rule). Token plan: captures what its attempts consumed, up to the hold. Job plan: refunded, except after provider spend (a running cancel, or earlier attempts that consumed) past the plan''s bound (refund_withheld).';

CREATE OR REPLACE FUNCTION public.complete_job(p_job_id uuid, p_attempt integer, p_output text, p_now timestamp with time zone DEFAULT now(), p_usage jsonb DEFAULT NULL::jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_job public.generation_jobs;
  v_result jsonb;
begin
  with completed as (
    update public.generation_jobs j
    set status = 'succeeded',
        output = p_output,
        partial_output = null,
        lease_expires_at = null,
        finished_at = p_now,
        -- No usage: the hold, so a missing report never under-charges.
        captured = case when j.meter in ('tokens', 'money')
                        then least(j.consumed + coalesce(case when p_usage is null then null
                          else private.usage_cost(j, p_usage) end, j.hold), j.hold)
                        else j.hold end,
        updated_at = p_now
    where j.id = p_job_id and j.status = 'running' and j.attempts = p_attempt
    returning j.*
  ), released as (
    update public.quota_usage q
    set units_used = q.units_used - (c.hold - c.captured), updated_at = p_now
    from completed c
    where c.hold > c.captured and c.organization_id is null
      and q.user_id = c.user_id and q.period_start = c.period_start and q.meter = c.meter
      and q.units_used >= c.hold - c.captured
    returning 1
  ), pool_released as (
    -- An organization job: the pool, then the member's row (the lock order).
    update public.organization_usage q
    set units_used = q.units_used - (c.hold - c.captured), updated_at = p_now
    from completed c
    where c.hold > c.captured and c.organization_id is not null
      and q.organization_id = c.organization_id and q.period_start = c.period_start
      and q.meter = c.meter and q.units_used >= c.hold - c.captured
    returning 1
  ), member_released as (
    update public.organization_member_usage u
    set units_used = u.units_used - (c.hold - c.captured), updated_at = p_now
    from completed c
    where c.hold > c.captured and c.organization_id is not null
      and exists (select from pool_released)
      and u.organization_id = c.organization_id and u.user_id = c.user_id
      and u.period_start = c.period_start and u.meter = c.meter
      and u.units_used >= c.hold - c.captured
    returning 1
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select c.id, c.user_id, p_now, 'completed', 'running', c.status,
      private.with_usage(jsonb_build_object('attempt', p_attempt, 'captured', c.captured,
        'released', c.hold - c.captured), p_usage)
    from completed c
  )
  select jsonb_build_object('outcome', 'completed', 'job', private.ending_json(c::public.generation_jobs),
    'released', c.hold = c.captured or exists (select from released)
      or (exists (select from pool_released) and exists (select from member_released)))
  into v_result
  from completed c;
  if v_result is not null then
    if not (v_result ->> 'released')::boolean then
      raise exception 'no hold to release for job %', p_job_id using errcode = 'P0001';
    end if;
    return v_result - 'released';
  end if;
  select * into v_job from public.generation_jobs j where j.id = p_job_id;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  return jsonb_build_object('outcome', 'not_running', 'job', private.job_json(v_job));
end
$function$;
comment on function public.complete_job(p_job_id uuid, p_attempt integer, p_output text, p_now timestamp with time zone, p_usage jsonb) is 'running under this claim → succeeded with the output; captures the whole hold (job plan: the kind''s units) or least(hold, consumed + the usage''s tokens) (token plan) and releases the rest (an organization job: on its pool, then on the member''s row); the usage goes in the event. Answers completed with the job''s state (private.ending_json).';

CREATE OR REPLACE FUNCTION public.create_invitation(p_organization_id uuid, p_by uuid, p_role text, p_cap integer DEFAULT NULL::integer, p_expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_now timestamp with time zone DEFAULT now(), p_email text DEFAULT NULL::text)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_token text := replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '');
  v_email text := lower(btrim(p_email));
  v_expires timestamptz := coalesce(p_expires_at, p_now + interval '7 days');
  v_id uuid;
begin
  if p_role is null or p_role not in ('admin', 'member') or p_cap < 0
     or p_expires_at <= p_now
     or (v_email is not null and v_email !~ '^[^@[:space:]]+@[^@[:space:]]+$') then
    return jsonb_build_object('outcome', 'invalid_invitation');
  end if;
  if not exists (select from public.organization_members m
      where m.organization_id = p_organization_id and m.user_id = p_by
        and m.role in ('owner', 'admin')) then
    return jsonb_build_object('outcome', 'forbidden');
  end if;
  if v_email is not null and exists (select from public.organization_members m
      where m.organization_id = p_organization_id
        and private.user_email(m.user_id) = v_email) then
    return jsonb_build_object('outcome', 'already_member');
  end if;
  insert into public.organization_invitations (organization_id, token_hash, role, cap,
    invited_by, created_at, expires_at, email)
  values (p_organization_id, encode(sha256(convert_to(v_token, 'UTF8')), 'hex'), p_role, p_cap,
    p_by, p_now, v_expires, v_email)
  returning id into v_id;
  return jsonb_build_object('outcome', 'created', 'invitation_id', v_id, 'token', v_token,
    'expires_at', v_expires, 'email', v_email, 'role', p_role, 'cap', p_cap);
end
$function$;
comment on function public.create_invitation(p_organization_id uuid, p_by uuid, p_role text, p_cap integer, p_expires_at timestamp with time zone, p_now timestamp with time zone, p_email text) is 'An owner or admin of the organization (else forbidden) invites p_email (else anyone holding the token) as admin or member with an optional cap, valid until p_expires_at (default 7 days; invalid_invitation for a bad role, cap, expiry or address; already_member when that address is a member). Answers created with the token, once: only its SHA-256 is stored.';

CREATE OR REPLACE FUNCTION public.delete_organization(p_organization_id uuid, p_by uuid, p_now timestamp with time zone DEFAULT now())
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
declare
  v_role text;
  v_old public.generation_jobs;
  v_canceled integer := 0;
  v_jobs integer;
  v_members integer;
begin
  select m.role into v_role from public.organization_members m
  where m.organization_id = p_organization_id and m.user_id = p_by;
  if v_role is null then
    return jsonb_build_object('outcome', 'not_a_member');
  end if;
  if v_role <> 'owner' then
    return jsonb_build_object('outcome', 'forbidden');
  end if;

  perform pg_catalog.pg_advisory_xact_lock(
    pg_catalog.hashtextextended('quota_jobs.enqueue:' || m.user_id::text, 0))
  from (select m.user_id from public.organization_members m
        where m.organization_id = p_organization_id order by m.user_id) m;
  -- Its invitations before its row: an accept holds its invitation, then waits on the
  -- organization's row (its membership's foreign key).
  perform from public.organization_invitations i where i.organization_id = p_organization_id
  order by i.id for update;
  perform from public.organizations o where o.id = p_organization_id for update;
  if not found then
    return jsonb_build_object('outcome', 'not_a_member');
  end if;
  perform from public.generation_jobs j where j.organization_id = p_organization_id
  order by j.id for update;
  perform from public.organization_usage q where q.organization_id = p_organization_id
  order by q.period_start, q.meter for update;

  for v_old in
    select * from public.generation_jobs j
    where j.organization_id = p_organization_id and j.status in ('queued', 'running')
    order by j.id
  loop
    perform private.end_with_refund(v_old, 'canceled', null, null, 'canceled', p_now,
      jsonb_build_object('by', 'organization_deletion'), null, v_old.status = 'running');
    v_canceled := v_canceled + 1;
  end loop;

  -- What the provider billed for these jobs stays countable, without anyone (as an erasure).
  perform private.keep_erased_cost(
    array(select j.id from public.generation_jobs j where j.organization_id = p_organization_id),
    'organization_deletion', p_now);

  perform pg_catalog.set_config('quota_jobs.erasing', 'on', true);
  delete from public.job_events e
  where e.job_id in (select j.id from public.generation_jobs j
                     where j.organization_id = p_organization_id);
  -- Their progress chunks go with them (on delete cascade); superseded callbacks keep their
  -- rows without the job id (on delete set null).
  delete from public.generation_jobs j where j.organization_id = p_organization_id;
  get diagnostics v_jobs = row_count;
  perform pg_catalog.set_config('quota_jobs.erasing', 'off', true);
  -- Every job went with its hold or capture, so the counters go too (quota_drift stays empty).
  delete from public.organization_usage q where q.organization_id = p_organization_id;
  delete from public.organization_member_usage m where m.organization_id = p_organization_id;
  delete from public.organization_members m where m.organization_id = p_organization_id;
  get diagnostics v_members = row_count;
  delete from public.organization_invitations i where i.organization_id = p_organization_id;
  delete from public.organizations o where o.id = p_organization_id;

  return jsonb_build_object('outcome', 'deleted', 'jobs', v_jobs, 'canceled', v_canceled,
    'members', v_members);
end
$function$;
comment on function public.delete_organization(p_organization_id uuid, p_by uuid, p_now timestamp with time zone) is 'Deletes an organization, by an owner (else forbidden; not_a_member for anyone else or none): cancels its active jobs, adds its jobs'' cost to public.erased_usage (no user, no organization), deletes its jobs with their events and chunks, its pools, member usage rows, memberships, invitations and the organization. Members'' personal jobs stay. Outcome deleted with jobs, canceled and members counts.';

CREATE OR REPLACE FUNCTION public.enqueue_job(p_user_id uuid, p_prompt text, p_idempotency_key text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT now(), p_prompt_tokens integer DEFAULT NULL::integer, p_kind text DEFAULT 'document'::text, p_input jsonb DEFAULT NULL::jsonb, p_model text DEFAULT NULL::text, p_organization_id uuid DEFAULT NULL::uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_plan public.plans;
  v_period_start timestamptz;
  v_hash text;
  v_job public.generation_jobs;
  v_used integer;
  v_member_used integer;
  v_cap integer;
  v_active integer;
  v_prompt_tokens integer;
  v_hold bigint;
  v_model public.models;
  v_model_id text;
  v_kind_model text;
  v_reasons boolean;
  v_units integer;
  v_input jsonb := coalesce(p_input, jsonb_build_object('prompt', p_prompt));
  v_result jsonb;
begin
  if p_prompt is null or p_prompt !~ '[^[:space:]]' or char_length(p_prompt) > 8000
     or p_prompt_tokens < 0 then
    return jsonb_build_object('outcome', 'invalid_prompt');
  end if;
  if jsonb_typeof(v_input) <> 'object' then
    return jsonb_build_object('outcome', 'invalid_input');
  end if;
  if p_idempotency_key is not null and char_length(p_idempotency_key) not between 1 and 255 then
    return jsonb_build_object('outcome', 'invalid_idempotency_key');
  end if;
  if p_kind is null or not exists (select from public.job_kinds k where k.id = p_kind) then
    return jsonb_build_object('outcome', 'unknown_kind');
  end if;
  -- A document's prompt is its whole input, the bound below is its bytes; any other kind's model
  -- input is more than its text (instructions, a schema), which only the caller can bound.
  if p_kind <> 'document' and p_prompt_tokens is null then
    raise exception 'enqueue_job: p_prompt_tokens is required for kind %', p_kind
      using errcode = 'P0001';
  end if;
  -- A signed token outlives its user (deleted) and can name one that never was: without an
  -- auth.users row there is no account, so no plan, not the free one.
  if not private.user_exists(p_user_id) then
    return jsonb_build_object('outcome', 'user_not_found');
  end if;
  -- A document keeps the hash it always had (a replay across this change still matches); any
  -- other kind hashes its kind and its input's jsonb text, which is canonical (keys sorted, no
  -- insignificant whitespace), so the same input sent with other spacing or key order matches.
  v_hash := encode(sha256(convert_to(case when p_kind = 'document' then p_prompt
    else p_kind || ':' || v_input::text end, 'UTF8')), 'hex');
  v_prompt_tokens := coalesce(p_prompt_tokens, octet_length(convert_to(p_prompt, 'UTF8')) + 8);

  -- First of the lock order (user lock → job row → pool row → member row): one user's enqueues,
  -- personal or in any of their organizations, take turns.
  perform pg_advisory_xact_lock(hashtextextended('quota_jobs.enqueue:' || p_user_id::text, 0));

  if p_organization_id is null then
    select p.id, p.name, p.period, p.units_per_period, p.max_active_jobs, p.max_output_tokens,
      p.max_paid_refunds, p.meter, p.model, p.service_tier, p.reasoning_effort,
      b.period_start,
      (select q.units_used from public.quota_usage q
       where q.user_id = p_user_id and q.period_start = b.period_start and q.meter = p.meter),
      (select count(*) from public.generation_jobs j
       where j.user_id = p_user_id and j.status in ('queued', 'running')
         and j.organization_id is null),
      k.units, k.model
    into v_plan.id, v_plan.name, v_plan.period, v_plan.units_per_period, v_plan.max_active_jobs,
      v_plan.max_output_tokens, v_plan.max_paid_refunds, v_plan.meter, v_plan.model,
      v_plan.service_tier, v_plan.reasoning_effort, v_period_start, v_used, v_active, v_units,
      v_kind_model
    from public.plans p
    cross join lateral (
      select date_trunc(p.period, p_now at time zone 'UTC') at time zone 'UTC' as period_start
    ) b
    left join public.plan_kinds k on k.plan_id = p.id and k.kind = p_kind
    where p.id = (select (private.plan_for(p_user_id)).id);
  else
    -- The organization's plan, its pool and the member's row and cap, in one read.
    select p.id, p.name, p.period, p.units_per_period, p.max_active_jobs, p.max_output_tokens,
      p.max_paid_refunds, p.meter, p.model, p.service_tier, p.reasoning_effort,
      b.period_start,
      (select q.units_used from public.organization_usage q
       where q.organization_id = m.organization_id and q.period_start = b.period_start
         and q.meter = p.meter),
      (select u.units_used from public.organization_member_usage u
       where u.organization_id = m.organization_id and u.user_id = p_user_id
         and u.period_start = b.period_start and u.meter = p.meter),
      (select count(*) from public.generation_jobs j
       where j.user_id = p_user_id and j.status in ('queued', 'running')
         and j.organization_id = m.organization_id),
      k.units, k.model, m.cap
    into v_plan.id, v_plan.name, v_plan.period, v_plan.units_per_period, v_plan.max_active_jobs,
      v_plan.max_output_tokens, v_plan.max_paid_refunds, v_plan.meter, v_plan.model,
      v_plan.service_tier, v_plan.reasoning_effort, v_period_start, v_used, v_member_used,
      v_active, v_units, v_kind_model, v_cap
    from public.organization_members m
    join public.organizations o on o.id = m.organization_id
    join public.plans p on p.id = o.plan
    cross join lateral (
      select date_trunc(p.period, p_now at time zone 'UTC') at time zone 'UTC' as period_start
    ) b
    left join public.plan_kinds k on k.plan_id = p.id and k.kind = p_kind
    where m.organization_id = p_organization_id and m.user_id = p_user_id;
    if not found then
      -- No such organization, or not theirs: the same answer, so it tells nothing of others.
      return jsonb_build_object('outcome', 'not_a_member');
    end if;
  end if;

  if p_idempotency_key is not null then
    select * into v_job from public.generation_jobs j
    where j.user_id = p_user_id and j.idempotency_key = p_idempotency_key;
    if found then
      if v_job.request_hash <> v_hash
         or v_job.organization_id is distinct from p_organization_id then
        return jsonb_build_object('outcome', 'idempotency_key_reused', 'job_id', v_job.id);
      end if;
      return jsonb_build_object(
        'outcome', 'replayed',
        'job', private.job_json(v_job),
        'usage', case when p_organization_id is null
          then private.usage_json(p_user_id, v_plan, p_now)
          else private.organization_usage_json(p_organization_id, p_user_id, v_plan, p_now) end
      );
    end if;
  end if;

  if v_units is null then
    return jsonb_build_object(
      'outcome', 'kind_not_in_plan',
      'plan', v_plan.id,
      'kinds', private.plan_kinds_json(v_plan.id)
    );
  end if;

  -- The model the job runs on: its kind's on the plan, else the plan's, else the deployment's. From
  -- its shutdown date on, the provider no longer serves it: refused here, nothing held, rather
  -- than failed at the provider.
  v_model_id := coalesce(v_kind_model, v_plan.model, p_model);
  select * into v_model from public.models m where m.id = v_model_id;
  if v_model.shutdown_date <= (p_now at time zone 'UTC')::date then
    return jsonb_build_object('outcome', 'model_retired', 'model', v_model.id,
      'shutdown_date', v_model.shutdown_date);
  end if;
  -- A model the price book does not know is taken to reason: its cut attempts cost their bound.
  v_reasons := v_model_id is not null and (v_model.id is null
    or (v_model.reasons and v_plan.reasoning_effort is distinct from 'none'));

  if v_plan.meter = 'money' then
    -- The call's worst case: the prompt's bound at the input price and the output bound
    -- (reasoning included) at the output price, at the dearer of the plan's and standard tier.
    select ceil((v_prompt_tokens::numeric * h.input_per_mtok
      + v_plan.max_output_tokens::numeric * h.output_per_mtok) / 1000000)::bigint
    into v_hold
    from private.held_prices(v_model_id, v_plan.service_tier) h;
  elsif v_plan.meter = 'tokens' then
    v_hold := v_prompt_tokens + v_plan.max_output_tokens;
  else
    v_hold := v_units;
  end if;

  if p_organization_id is not null then
    -- The pool's limit, the member's cap, the member's active jobs there: refused before anything
    -- is held (the reservation's guards refuse what a race makes of these reads).
    if coalesce(v_used, 0) + v_hold > v_plan.units_per_period then
      return jsonb_build_object('outcome', 'pool_exhausted', 'hold', v_hold,
        'resets_at', private.period_end(v_plan.period, v_period_start),
        'usage', private.organization_usage_json(p_organization_id, p_user_id, v_plan, p_now));
    end if;
    if v_cap is not null and coalesce(v_member_used, 0) + v_hold > v_cap then
      return jsonb_build_object('outcome', 'member_cap_reached', 'hold', v_hold,
        'resets_at', private.period_end(v_plan.period, v_period_start),
        'usage', private.organization_usage_json(p_organization_id, p_user_id, v_plan, p_now));
    end if;
    if v_active >= v_plan.max_active_jobs then
      return jsonb_build_object('outcome', 'too_many_active_jobs',
        'usage', private.organization_usage_json(p_organization_id, p_user_id, v_plan, p_now));
    end if;
    return private.enqueue_in_organization(p_organization_id, p_user_id, v_plan, v_period_start,
      v_cap, v_active, v_hold,
      jsonb_build_object('kind', p_kind, 'prompt', p_prompt, 'input', v_input, 'hash', v_hash,
        'idempotency_key', p_idempotency_key, 'prompt_tokens', v_prompt_tokens,
        'model', v_model_id, 'reasons', v_reasons),
      p_now);
  end if;

  if coalesce(v_used, 0) + v_hold > v_plan.units_per_period then
    return jsonb_build_object(
      'outcome', 'quota_exceeded',
      'hold', v_hold,
      'resets_at', private.period_end(v_plan.period, v_period_start),
      'usage', private.usage_json(p_user_id, v_plan, p_now)
    );
  end if;
  if v_active >= v_plan.max_active_jobs then
    return jsonb_build_object(
      'outcome', 'too_many_active_jobs',
      'usage', private.usage_json(p_user_id, v_plan, p_now)
    );
  end if;

  with reserved as (
    insert into public.quota_usage as q (user_id, period_start, meter, units_used, updated_at)
    values (p_user_id, v_period_start, v_plan.meter, v_hold, p_now)
    on conflict (user_id, period_start, meter) do update
      set units_used = q.units_used + v_hold, updated_at = p_now
      where q.units_used + v_hold <= v_plan.units_per_period
    returning q.units_used
  ), inserted as (
    insert into public.generation_jobs (
      user_id, status, kind, prompt, input, request_hash, idempotency_key, plan_id, period_start,
      meter, prompt_tokens, hold, model, service_tier, reasons, created_at, queued_at, updated_at
    )
    select p_user_id, 'queued', p_kind, p_prompt, v_input, v_hash, p_idempotency_key, v_plan.id,
      v_period_start, v_plan.meter, v_prompt_tokens, v_hold, v_model_id, v_plan.service_tier,
      v_reasons, p_now, p_now, p_now
    from reserved
    returning *
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select i.id, i.user_id, p_now, 'enqueued', null, i.status,
      jsonb_build_object('plan', v_plan.id, 'kind', p_kind, 'hold', v_hold)
    from inserted i
  )
  select jsonb_build_object(
    'outcome', 'enqueued',
    'job', to_jsonb(i) - 'request_hash',
    'usage', jsonb_build_object(
      'plan', v_plan.id,
      'meter', v_plan.meter,
      'used', r.units_used,
      'limit', v_plan.units_per_period,
      'period_start', v_period_start,
      'resets_at', ((v_period_start at time zone 'UTC') + ('1 ' || v_plan.period)::interval) at time zone 'UTC',
      'active', v_active + 1,
      'max_active', v_plan.max_active_jobs,
      'kinds', private.plan_kinds_json(v_plan.id)
    )
  ) into v_result
  from inserted i, reserved r;
  if v_result is null then
    -- Unreachable while the lock above is held; kept so the limit holds even without it.
    return jsonb_build_object(
      'outcome', 'quota_exceeded',
      'hold', v_hold,
      'resets_at', private.period_end(v_plan.period, v_period_start),
      'usage', private.usage_json(p_user_id, v_plan, p_now)
    );
  end if;
  return v_result;
end
$function$;
comment on function public.enqueue_job(p_user_id uuid, p_prompt text, p_idempotency_key text, p_now timestamp with time zone, p_prompt_tokens integer, p_kind text, p_input jsonb, p_model text, p_organization_id uuid) is 'Starts a job of a kind (default document) for a user that exists (else user_not_found): a kind the plan does not offer is kind_not_in_plan; a model (the kind''s on the plan, else the plan''s, else p_model) past its shutdown date is model_retired; holds the kind''s units (job plan), p_prompt_tokens + max_output_tokens (token plan) or that call''s worst case in micro-dollars (money plan) on the counter of the plan''s meter under the limit, checks the active-job limit and the idempotency key, inserts, in one transaction. With p_organization_id: the caller must be a member (not_a_member), the plan is the organization''s, and the hold goes on its pool and the member''s row, under the plan''s limit (pool_exhausted) and the member''s cap (member_cap_reached) (private.enqueue_in_organization). A refusal holds nothing.';

CREATE OR REPLACE FUNCTION public.erase_user(p_user_id uuid, p_now timestamp with time zone DEFAULT now())
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
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
$function$;
comment on function public.erase_user(p_user_id uuid, p_now timestamp with time zone) is 'DELETE /api/me: private.erase_user_data, then the user''s auth.users row (Supabase Auth''s own tables cascade from it). Idempotent: a second call erases 0 jobs, account_deleted false. Security definer: only the owner may delete from auth.users.';

CREATE OR REPLACE FUNCTION public.export_user(p_user_id uuid, p_after_created_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_after_id uuid DEFAULT NULL::uuid, p_limit integer DEFAULT 100)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
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
    ), '[]'::jsonb),
    -- Their memberships and what they held in each organization (not the pool: the team's).
    'organizations', coalesce((
      select jsonb_agg(jsonb_build_object('organization_id', m.organization_id, 'name', o.name,
        'role', m.role, 'cap', m.cap, 'joined_at', m.created_at, 'usage', coalesce((
          select jsonb_agg(to_jsonb(u) - 'user_id' - 'organization_id'
            order by u.period_start, u.meter)
          from public.organization_member_usage u
          where u.user_id = p_user_id and u.organization_id = m.organization_id
        ), '[]'::jsonb)) order by m.created_at, m.organization_id)
      from public.organization_members m join public.organizations o on o.id = m.organization_id
      where m.user_id = p_user_id
    ), '[]'::jsonb)
  ) end
$function$;
comment on function public.export_user(p_user_id uuid, p_after_created_at timestamp with time zone, p_after_id uuid, p_limit integer) is 'GET /api/me/export, one page: the user''s jobs oldest first, their organization jobs included (every column but the prompt hash, each with its events), keyset-paginated on (created_at, id), at most 500 a page; the first page (no cursor) also carries their user_plans row, quota_usage rows, log pseudonym (null when no log line named them yet) and their organizations (membership, cap and their own usage rows there).';

CREATE OR REPLACE FUNCTION public.fail_job(p_job_id uuid, p_reason text, p_error text DEFAULT NULL::text, p_attempt integer DEFAULT NULL::integer, p_now timestamp with time zone DEFAULT now(), p_usage jsonb DEFAULT NULL::jsonb, p_seq integer DEFAULT NULL::integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
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
  return jsonb_build_object('outcome', 'failed', 'job', private.ending_json(private.end_with_refund(
    v_old, 'failed', p_reason, p_error, 'failed', p_now,
    private.with_usage(jsonb_build_object('attempt', p_attempt, 'reason', p_reason), p_usage),
    case when p_usage is null then null else private.usage_cost(v_old, p_usage) end
  )));
end
$function$;
comment on function public.fail_job(p_job_id uuid, p_reason text, p_error text, p_attempt integer, p_now timestamp with time zone, p_usage jsonb, p_seq integer) is 'queued or running (with p_attempt: only that claim) → failed (private.end_with_refund''s rule: a token plan captures what was consumed; a job plan''s refund after spend is bounded; provider_misconfigured captures 0, unbounded). With p_seq older than the job''s publish_seq: superseded, nothing changes but a row in superseded_callbacks. Answers failed with the job''s state (private.ending_json).';

CREATE OR REPLACE FUNCTION public.get_job(p_job_id uuid, p_user_id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return (
  select coalesce(
    (select jsonb_build_object('outcome', 'found',
       'job', private.job_json(j) || jsonb_build_object('cancel_refunds', private.cancel_refunds(j)))
     from public.generation_jobs j where j.id = p_job_id and j.user_id = p_user_id),
    jsonb_build_object('outcome', 'not_found')
  )
  );
end
$function$;
comment on function public.get_job(p_job_id uuid, p_user_id uuid) is 'A job for its owner; another user''s job is not_found, exactly like a missing one.';

CREATE OR REPLACE FUNCTION public.get_usage(p_user_id uuid, p_now timestamp with time zone DEFAULT now())
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return jsonb_build_object('outcome', 'usage', 'usage', private.usage_json(p_user_id, private.plan_for(p_user_id), p_now));
end
$function$;
comment on function public.get_usage(p_user_id uuid, p_now timestamp with time zone) is 'A user''s plan, units used and limit in the current period, when it resets, active jobs.';

CREATE OR REPLACE FUNCTION public.list_jobs(p_user_id uuid, p_limit integer DEFAULT 20, p_before_created_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_before_id uuid DEFAULT NULL::uuid)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  with lim as (
    select least(greatest(coalesce(p_limit, 20), 1), 100) as n
  ), page as (
    select j as job, row_number() over (order by j.created_at desc, j.id desc) as rn
    from public.generation_jobs j
    where j.user_id = p_user_id
      and (p_before_created_at is null or (j.created_at, j.id) < (p_before_created_at, p_before_id))
    order by j.created_at desc, j.id desc
    limit (select n + 1 from lim)
  )
  select jsonb_build_object(
    'outcome', 'listed',
    'jobs', coalesce(
      (select jsonb_agg(
         private.job_json(p.job) || jsonb_build_object('cancel_refunds', private.cancel_refunds(p.job))
         order by p.rn)
       from page p, lim where p.rn <= lim.n),
      '[]'::jsonb
    ),
    'has_more', (select count(*) from page) > (select n from lim)
  )
$function$;
comment on function public.list_jobs(p_user_id uuid, p_limit integer, p_before_created_at timestamp with time zone, p_before_id uuid) is 'A user''s jobs, newest first, keyset-paginated on (created_at, id); at most 100 a page.';

CREATE OR REPLACE FUNCTION public.maintain_job_events(p_before timestamp with time zone, p_now timestamp with time zone DEFAULT now(), p_months_ahead integer DEFAULT 2, p_max_drops integer DEFAULT 2)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
 SET "TimeZone" TO 'UTC'
 SET lock_timeout TO '2s'
AS $function$
declare
  v_created text[] := '{}';
  v_dropped text[] := '{}';
  v_name text;
  v_active_since timestamptz;
  v_cutoff timestamptz;
  v_part record;
  v_horizon timestamptz;
begin
  if p_before is null or p_now is null or p_months_ahead is null or p_months_ahead < 0
     or p_months_ahead > 24 or p_max_drops is null or p_max_drops < 0 then
    return jsonb_build_object('outcome', 'invalid_arguments');
  end if;
  -- This month's partition and the next ones, so inserts never reach the default.
  for i in 0 .. p_months_ahead loop
    v_name := private.job_events_month_partition(p_now + make_interval(months => i));
    if v_name is not null then
      v_created := v_created || v_name;
    end if;
  end loop;

  -- The cutoff: events before it may go. Never the current month (the current quota period of
  -- a month plan starts there, a day plan's later), by p_now's clock nor the database's (a
  -- p_now far ahead drops nothing more), never an active job's (its ending reads and appends
  -- to its events, and reconcile audits them), whatever p_before says.
  select min(j.created_at) into v_active_since
  from public.generation_jobs j where j.status in ('queued', 'running');
  v_cutoff := least(p_before, date_trunc('month', p_now), date_trunc('month', now()),
    coalesce(v_active_since, 'infinity'));

  -- Partitions wholly before the cutoff, oldest first, at most p_max_drops a run.
  for v_part in
    select c.relname, b.upper_bound
    from pg_inherits i
    join pg_class c on c.oid = i.inhrelid
    cross join lateral (
      select (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz
        as upper_bound
    ) b
    where i.inhparent = 'public.job_events'::regclass
      and b.upper_bound is not null and b.upper_bound <= v_cutoff
    order by b.upper_bound
    limit p_max_drops
  loop
    begin
      execute format('drop table private.%I', v_part.relname);
    exception when lock_not_available then
      -- Long readers hold the table: the next run drops it.
      exit;
    end;
    v_dropped := v_dropped || v_part.relname::text;
    update private.history_horizon h
      set events_complete_since = greatest(h.events_complete_since, v_part.upper_bound);
  end loop;

  select h.events_complete_since into v_horizon from private.history_horizon h;
  return jsonb_build_object('outcome', 'maintained', 'created', to_jsonb(v_created),
    'dropped', to_jsonb(v_dropped), 'cutoff', v_cutoff, 'events_complete_since', v_horizon);
end
$function$;
comment on function public.maintain_job_events(p_before timestamp with time zone, p_now timestamp with time zone, p_months_ahead integer, p_max_drops integer) is 'Keeps job_events'' partitions: creates this UTC month''s and the next p_months_ahead, and drops at most p_max_drops partitions wholly older than the cutoff, the earliest of p_before (now minus the retention), the start of the current month (by p_now and by the database''s clock) and the oldest active job''s creation. Cheap when there is nothing to do. Outcome maintained (created, dropped, cutoff, events_complete_since) or invalid_arguments.';

CREATE OR REPLACE FUNCTION public.my_organizations(p_user_id uuid, p_now timestamp with time zone DEFAULT now())
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return jsonb_build_object('outcome', 'organizations', 'organizations', coalesce((
    select jsonb_agg(jsonb_build_object('id', o.id, 'name', o.name, 'role', m.role,
        'usage', private.organization_usage_json(o.id, p_user_id, p, p_now))
      order by o.name, o.id)
    from public.organization_members m
    join public.organizations o on o.id = m.organization_id
    join public.plans p on p.id = o.plan
    where m.user_id = p_user_id), '[]'::jsonb));
end
$function$;
comment on function public.my_organizations(p_user_id uuid, p_now timestamp with time zone) is 'The user''s organizations (outcome organizations) by name: id, name, their role, and their usage there (private.organization_usage_json: the pool''s used and limit, their cap and what they hold).';

CREATE OR REPLACE FUNCTION public.ops_failure_reasons(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval)
 RETURNS TABLE(bucket timestamp with time zone, reason text, jobs bigint)
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  select pg_catalog.date_bin(p_bucket, j.finished_at, p_from), j.failure_reason, count(*)
  from public.generation_jobs j
  where j.finished_at >= p_from and j.finished_at < p_to and j.status = 'failed'
    and exists (select from private.ops_buckets(p_from, p_to, p_bucket))
  group by 1, 2
  order by 1, 2
$function$;
comment on function public.ops_failure_reasons(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval) is 'Operator page: failed jobs per bucket and failure reason (only the buckets and reasons that had some). Walks generation_jobs_finished.';

CREATE OR REPLACE FUNCTION public.ops_job_series(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval)
 RETURNS TABLE(bucket timestamp with time zone, enqueued bigint, succeeded bigint, failed bigint, canceled bigint, refunded bigint, withheld bigint, tokens_held bigint, tokens_captured bigint, failure_callbacks bigint, superseded_callbacks bigint)
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
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
$function$;
comment on function public.ops_job_series(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval) is 'Operator page: per bucket of [p_from, p_to), jobs enqueued (and the tokens a token plan held), jobs ended succeeded / failed / canceled, refunded or withheld, tokens a token plan captured, failure callbacks that failed a job (delivery_failed) and superseded ones. Walks generation_jobs_created, generation_jobs_finished and superseded_callbacks_at.';

CREATE OR REPLACE FUNCTION public.ops_latency_series(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval)
 RETURNS TABLE(bucket timestamp with time zone, metric text, jobs bigint, p50 double precision, p90 double precision, p99 double precision)
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
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
$function$;
comment on function public.ops_latency_series(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval) is 'Operator page: per bucket (only those with some), p50/p90/p99 seconds of queue_latency (a job''s first claim, event started of attempt 1, minus its created_at) and run_time (a succeeded job''s finished_at minus its last claim''s started_at). Walks job_events_at and generation_jobs_finished.';

CREATE OR REPLACE FUNCTION public.ops_metrics(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval, p_now timestamp with time zone DEFAULT now(), p_lease_grace_seconds integer DEFAULT 300, p_undelivered_after_seconds integer DEFAULT 900, p_max_age_seconds integer DEFAULT 10800)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
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
$function$;
comment on function public.ops_metrics(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval, p_now timestamp with time zone, p_lease_grace_seconds integer, p_undelivered_after_seconds integer, p_max_age_seconds integer) is 'Operator page (GET /api/ops/metrics): every series of [p_from, p_to) by p_bucket and the now tiles, as one jsonb (outcome metrics), in one round trip.';

CREATE OR REPLACE FUNCTION public.ops_now(p_now timestamp with time zone DEFAULT now(), p_lease_grace_seconds integer DEFAULT 300, p_undelivered_after_seconds integer DEFAULT 900, p_max_age_seconds integer DEFAULT 10800)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  select jsonb_build_object(
    'at', p_now,
    'stuck', jsonb_build_object(
      'running_lease_expired', (select count(*) from public.generation_jobs j
        where private.stale_lease_expired(j, p_now, p_lease_grace_seconds)),
      'active_past_max_age', (select count(*) from public.generation_jobs j
        where private.stale_past_max_age(j, p_now, p_max_age_seconds)),
      'queued_never_delivered', (select count(*) from public.generation_jobs j
        where private.stale_undelivered(j, p_now, p_undelivered_after_seconds))),
    'drift_since', s.since,
    'drift_rows', (select count(*) from private.quota_drift_since(s.since)))
  from (select private.open_periods_since(p_now) as since) s
$function$;
comment on function public.ops_now(p_now timestamp with time zone, p_lease_grace_seconds integer, p_undelivered_after_seconds integer, p_max_age_seconds integer) is 'Operator page''s "now" tiles: active jobs stale by each of the sweeper''s three rules (the same predicates and partial indexes as sweep_jobs and reconcile), and the rows of quota_drift in the periods that can still change (those starting at or after drift_since; closed periods are npm run reconcile''s).';

CREATE OR REPLACE FUNCTION public.ops_plans(p_default_model text DEFAULT NULL::text, p_attempts integer DEFAULT 2)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  select jsonb_build_object('outcome', 'listed', 'plans', coalesce(jsonb_agg(jsonb_build_object(
    'plan', w.plan_id,
    'meter', w.meter,
    'model', w.model,
    'service_tier', w.service_tier,
    'worst_case_micro_usd', w.worst_case_micro_usd,
    'shutdown_date', m.shutdown_date,
    'checked_at', m.catalogue_checked_at
  ) order by w.plan_id), '[]'::jsonb))
  from public.plan_worst_case(p_default_model, p_attempts) w
  left join public.models m on m.id = w.model
$function$;
comment on function public.ops_plans(p_default_model text, p_attempts integer) is 'The operator page''s plans table: each plan''s model, tier and worst-case bill per period (public.plan_worst_case) with the model''s shutdown date as the catalogue watch last read it.';

CREATE OR REPLACE FUNCTION public.ops_provider_series(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval)
 RETURNS TABLE(bucket timestamp with time zone, provider_tokens bigint, quota_429s bigint, gate_closed_seconds double precision)
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
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
$function$;
comment on function public.ops_provider_series(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval) is 'Operator page: per bucket, provider tokens consumed (every attempt''s usage in job_events), provider 429s the jobs counted (requeued / gave_up with quota_hit), and seconds the shared provider gate was closed (the union of [at, resume_at] of those events, clipped to p_to). Walks job_events_at.';

CREATE OR REPLACE FUNCTION public.organization_overview(p_organization_id uuid, p_by uuid, p_now timestamp with time zone DEFAULT now())
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
declare
  v_role text;
  v_org public.organizations;
  v_plan public.plans;
  v_start timestamptz;
begin
  select m.role into v_role from public.organization_members m
  where m.organization_id = p_organization_id and m.user_id = p_by;
  if v_role is null then
    return jsonb_build_object('outcome', 'not_a_member');
  end if;
  select * into v_org from public.organizations o where o.id = p_organization_id;
  select * into v_plan from public.plans p where p.id = v_org.plan;
  v_start := private.period_start(v_plan.period, p_now);
  return jsonb_build_object('outcome', 'overview', 'id', v_org.id, 'name', v_org.name,
    'role', v_role, 'plan', v_plan.id,
    'usage', private.organization_usage_json(v_org.id, p_by, v_plan, p_now),
    'members', case when v_role in ('owner', 'admin') then (
      select jsonb_agg(private.member_json(v_org.id, m.user_id, v_start, v_plan.meter)
        order by m.created_at, m.user_id)
      from public.organization_members m where m.organization_id = v_org.id) end,
    'invitations', case when v_role in ('owner', 'admin') then coalesce((
      select jsonb_agg(jsonb_build_object('id', i.id, 'email', i.email, 'role', i.role,
          'cap', i.cap, 'created_at', i.created_at, 'expires_at', i.expires_at)
        order by i.created_at, i.id)
      from public.organization_invitations i
      where i.organization_id = v_org.id and i.accepted_at is null
        and i.expires_at > p_now), '[]'::jsonb) end);
end
$function$;
comment on function public.organization_overview(p_organization_id uuid, p_by uuid, p_now timestamp with time zone) is 'An organization as p_by sees it (not_a_member when they are not one): its name, their role and usage; for an owner or admin also every member (private.member_json) and the pending invitations. Never a job, a prompt or an output.';

CREATE OR REPLACE FUNCTION public.plan_worst_case(p_default_model text DEFAULT NULL::text, p_attempts integer DEFAULT 2, p_prompt_tokens integer DEFAULT 8008)
 RETURNS TABLE(plan_id text, meter text, model text, service_tier text, units_per_period integer, billed_calls integer, worst_case_micro_usd bigint)
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  select p.id, p.meter, coalesce(p.model, p_default_model), p.service_tier, p.units_per_period,
    case when p.meter = 'jobs' then
      (p.units_per_period / greatest((select min(k.units) from public.plan_kinds k
        where k.plan_id = p.id), 1) + coalesce(private.refund_bound(p), 0)) * p_attempts end,
    case p.meter
      -- Each billed call at most its prompt's bound and its output bound, at the held prices.
      when 'jobs' then ceil(
        ((p.units_per_period / greatest((select min(k.units) from public.plan_kinds k
          where k.plan_id = p.id), 1) + coalesce(private.refund_bound(p), 0)) * p_attempts)::numeric
        * (p_prompt_tokens::numeric * h.input_per_mtok + p.max_output_tokens::numeric * h.output_per_mtok)
        / 1000000)::bigint
      -- Below twice the plan's tokens (the attempt budget), each at the dearest token's price.
      when 'tokens' then ceil(2 * p.units_per_period::numeric
        * greatest(h.input_per_mtok, h.output_per_mtok) / 1000000)::bigint
      -- Below twice the plan's micro-dollars: a job's attempts stop at 2 × hold.
      else 2 * p.units_per_period::bigint
    end
  from public.plans p
  -- The dearest of the models the plan's calls may run on; null when one of them is not priced.
  left join lateral (
    select case when bool_and(hp.input_per_mtok is not null) then max(hp.input_per_mtok) end
        as input_per_mtok,
      case when bool_and(hp.output_per_mtok is not null) then max(hp.output_per_mtok) end
        as output_per_mtok
    from (
      select coalesce(p.model, p_default_model) as model
      union
      select k.model from public.plan_kinds k where k.plan_id = p.id and k.model is not null
    ) used
    left join lateral private.held_prices(used.model, p.service_tier) hp on true
  ) h on true
  order by p.id
$function$;
comment on function public.plan_worst_case(p_default_model text, p_attempts integer, p_prompt_tokens integer) is 'Each plan''s worst-case provider bill per period, in micro-dollars, from the price book: a job plan''s billed calls (units / the cheapest kind + refunds after spend, × attempts per job) at their prompt (p_prompt_tokens) and output bounds; a token plan''s twice its tokens at the dearest token price; a money plan''s twice its micro-dollars. Prices are the dearest of the models the plan and its kinds run on; null where one is not priced. docs/DESIGN.md#metering-hold-and-capture says why each bound holds.';

CREATE OR REPLACE FUNCTION public.record_attempt_usage(p_job_id uuid, p_attempt integer, p_usage jsonb, p_now timestamp with time zone DEFAULT now())
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_job public.generation_jobs;
begin
  -- Only appends: the job may be final (the trigger forbids touching it) and job_events is
  -- append-only. At most one usage record per attempt, whoever wrote it, so a retried call
  -- cannot count an attempt twice. The row lock orders concurrent calls for one job.
  select * into v_job from public.generation_jobs j where j.id = p_job_id for share;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  if p_attempt is null or p_attempt < 1 or p_attempt > v_job.attempts then
    return jsonb_build_object('outcome', 'no_such_attempt');
  end if;
  if exists (
    select from public.job_events e
    where e.job_id = p_job_id and e.detail ? 'usage' and (e.detail ->> 'attempt')::integer = p_attempt
  ) then
    return jsonb_build_object('outcome', 'already_recorded');
  end if;
  insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
  values (v_job.id, v_job.user_id, p_now, 'attempt_usage', v_job.status, v_job.status,
    jsonb_build_object('attempt', p_attempt, 'usage', p_usage));
  return jsonb_build_object('outcome', 'recorded');
end
$function$;
comment on function public.record_attempt_usage(p_job_id uuid, p_attempt integer, p_usage jsonb, p_now timestamp with time zone) is 'What an attempt consumed when its own transition was refused (someone else ended or reclaimed the job): one attempt_usage event, insert only. recorded, already_recorded, no_such_attempt, not_found.';

CREATE OR REPLACE FUNCTION public.record_model_catalogue(p_model text, p_shutdown_date date, p_now timestamp with time zone DEFAULT now())
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_before date;
  v_found boolean;
begin
  select m.shutdown_date into v_before from public.models m where m.id = p_model for update;
  v_found := found;
  if not v_found then
    return jsonb_build_object('outcome', 'not_priced');
  end if;
  update public.models m set shutdown_date = p_shutdown_date, catalogue_checked_at = p_now
  where m.id = p_model;
  return jsonb_build_object('outcome', 'recorded',
    'changed', v_before is distinct from p_shutdown_date, 'shutdown_date', p_shutdown_date);
end
$function$;
comment on function public.record_model_catalogue(p_model text, p_shutdown_date date, p_now timestamp with time zone) is 'What the provider''s catalogue says of a priced model: its shutdown date (null: none announced), and when it was read. not_priced for a model the price book does not have.';

CREATE OR REPLACE FUNCTION public.record_progress(p_job_id uuid, p_attempt integer, p_offset integer, p_text text, p_completion_tokens integer, p_now timestamp with time zone DEFAULT now(), p_prompt_tokens integer DEFAULT NULL::integer, p_thinking boolean DEFAULT false, p_reasoning_tokens integer DEFAULT NULL::integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
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
$function$;
comment on function public.record_progress(p_job_id uuid, p_attempt integer, p_offset integer, p_text text, p_completion_tokens integer, p_now timestamp with time zone, p_prompt_tokens integer, p_thinking boolean, p_reasoning_tokens integer) is 'The running attempt''s new text (p_text, after the p_offset characters the caller believes stored: only what lies beyond what is stored is appended, so a retry adds nothing twice), its completion tokens so far (reasoning included: billed output), whether it is thinking (reasoning, no visible text yet) and the reasoning tokens reported so far, and (p_prompt_tokens) its prompt as the worker counts it, which lowers prompt_tokens (never raises it). recorded with `stored` (the characters stored now: send from there), or not_running (with the job''s status): the worker then cuts the model''s stream at once.';

CREATE OR REPLACE FUNCTION public.release_job(p_job_id uuid, p_attempt integer, p_error text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT now(), p_usage jsonb DEFAULT NULL::jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_old public.generation_jobs;
  v_tokens integer;
  v_result jsonb;
begin
  select * into v_old from public.generation_jobs j where j.id = p_job_id for update;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  if v_old.status <> 'running' or v_old.attempts <> p_attempt then
    return jsonb_build_object('outcome', 'not_running', 'job', private.job_json(v_old));
  end if;
  v_tokens := private.usage_cost(v_old, p_usage);

  if v_old.meter in ('tokens', 'money') and v_old.consumed + v_tokens + v_old.hold > 2 * v_old.hold then
    -- As before, this attempt goes into consumed (the job's whole spend), so the ending's own is 0.
    update public.generation_jobs j set consumed = j.consumed + v_tokens where j.id = p_job_id
    returning * into v_old;
    return jsonb_build_object('outcome', 'budget_exhausted', 'job', private.job_json(
      private.end_with_refund(v_old, 'failed', 'attempt_budget_exhausted', p_error, 'failed', p_now,
        private.with_usage(jsonb_build_object('attempt', p_attempt,
          'reason', 'attempt_budget_exhausted', 'consumed', v_old.consumed), p_usage),
        0)));
  end if;

  with released as (
    update public.generation_jobs j
    set status = 'queued',
        lease_expires_at = null,
        queued_at = p_now,
        partial_output = null,
        consumed = j.consumed + v_tokens,
        last_error = coalesce(p_error, j.last_error),
        updated_at = p_now
    where j.id = p_job_id
    returning j.*
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select r.id, r.user_id, p_now, 'released', 'running', r.status,
      private.with_usage(jsonb_build_object('attempt', p_attempt), p_usage)
    from released r
  )
  select jsonb_build_object('outcome', 'released', 'job', to_jsonb(r) - 'request_hash') into v_result
  from released r;
  return v_result;
end
$function$;
comment on function public.release_job(p_job_id uuid, p_attempt integer, p_error text, p_now timestamp with time zone, p_usage jsonb) is 'running under this claim → queued after a transient error, the attempt''s tokens added to consumed; on a token plan, when no further attempt fits under 2 × hold, → failed (attempt_budget_exhausted) capturing least(hold, consumed + this attempt): budget_exhausted.';

CREATE OR REPLACE FUNCTION public.remove_member(p_organization_id uuid, p_user_id uuid, p_by uuid, p_now timestamp with time zone DEFAULT now())
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_by_role text;
  v_role text;
  v_old public.generation_jobs;
  v_canceled integer := 0;
  v_refunded integer := 0;
  v_job public.generation_jobs;
begin
  -- The removed member's enqueues wait: none starts a job in this organization meanwhile.
  perform pg_advisory_xact_lock(hashtextextended('quota_jobs.enqueue:' || p_user_id::text, 0));
  select m.role into v_by_role from public.organization_members m
  where m.organization_id = p_organization_id and m.user_id = p_by;
  select m.role into v_role from public.organization_members m
  where m.organization_id = p_organization_id and m.user_id = p_user_id
  for update;
  if v_role is null then
    return jsonb_build_object('outcome', 'not_a_member');
  end if;
  -- A member may leave; only an owner or admin removes someone else, and only an owner an owner.
  if p_by is distinct from p_user_id and (v_by_role is null or v_by_role = 'member'
     or (v_role = 'owner' and v_by_role <> 'owner')) then
    return jsonb_build_object('outcome', 'forbidden');
  end if;
  if v_role = 'owner' and not exists (select from public.organization_members m
      where m.organization_id = p_organization_id and m.role = 'owner'
        and m.user_id <> p_user_id) then
    return jsonb_build_object('outcome', 'last_owner');
  end if;

  perform from public.generation_jobs j
  where j.user_id = p_user_id and j.organization_id = p_organization_id
    and j.status in ('queued', 'running')
  order by j.id for update;
  perform from public.organization_usage q
  where q.organization_id = p_organization_id and (q.period_start, q.meter) in (
    select j.period_start, j.meter from public.generation_jobs j
    where j.user_id = p_user_id and j.organization_id = p_organization_id
      and j.status in ('queued', 'running'))
  order by q.period_start, q.meter
  for update;
  for v_old in
    select * from public.generation_jobs j
    where j.user_id = p_user_id and j.organization_id = p_organization_id
      and j.status in ('queued', 'running')
    order by j.id
  loop
    v_job := private.end_with_refund(v_old, 'canceled', null, null, 'canceled', p_now,
      jsonb_build_object('by', 'member_removal'), null, v_old.status = 'running');
    v_canceled := v_canceled + 1;
    v_refunded := v_refunded + case when v_job.refunded_at is not null then 1 else 0 end;
  end loop;

  delete from public.organization_members m
  where m.organization_id = p_organization_id and m.user_id = p_user_id;
  return jsonb_build_object('outcome', 'removed', 'canceled', v_canceled,
    'refunded', v_refunded);
end
$function$;
comment on function public.remove_member(p_organization_id uuid, p_user_id uuid, p_by uuid, p_now timestamp with time zone) is 'Removes p_user_id from an organization, by p_by: the member themselves, an owner or admin (an owner only by an owner; never the last owner: last_owner). Their active jobs there are canceled by a cancel''s refund rule (private.end_with_refund) and the membership deleted; their finished jobs and usage row stay. not_a_member, forbidden, last_owner, or removed (with canceled and refunded counts).';

CREATE OR REPLACE FUNCTION public.requeue_job(p_job_id uuid, p_attempt integer, p_resume_at timestamp with time zone, p_error text DEFAULT NULL::text, p_max_hits integer DEFAULT 3, p_max_age_seconds integer DEFAULT 10800, p_now timestamp with time zone DEFAULT now(), p_count_hit boolean DEFAULT true, p_usage jsonb DEFAULT NULL::jsonb, p_capacity boolean DEFAULT false)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
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
      private.usage_cost(v_old, p_usage)
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
$function$;
comment on function public.requeue_job(p_job_id uuid, p_attempt integer, p_resume_at timestamp with time zone, p_error text, p_max_hits integer, p_max_age_seconds integer, p_now timestamp with time zone, p_count_hit boolean, p_usage jsonb, p_capacity boolean) is 'running under this claim → queued until p_resume_at after a provider quota hit (counted), a closed provider gate (p_count_hit false) or no flex capacity (p_capacity: never counted, waiting_for capacity), or failed when it gives up (hits or age; provider_quota_exhausted, or capacity_unavailable for a capacity wait; private.end_with_refund''s rule); the attempt''s usage goes in the event, and quota_hit says whether it was a counted provider 429 (the operator page''s 429s and gate time).';

CREATE OR REPLACE FUNCTION public.retention_batch(p_before timestamp with time zone, p_limit integer)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
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
$function$;
comment on function public.retention_batch(p_before timestamp with time zone, p_limit integer) is 'Retention, one batch: erases the text (prompt, input, output, partial output, error, idempotency key, prompt hash) of at most p_limit (≤ 10000) jobs finished before p_before, oldest first, on the generation_jobs_finished_unerased index; rows another batch holds are skipped. Accounting columns and job_events (which hold no text) stay. Returns how many jobs it erased; fewer than p_limit means none is left. Security definer: the final-job trigger lets only the owner do this (private.erasing).';

CREATE OR REPLACE FUNCTION public.retention_run(p_before timestamp with time zone, p_limit integer)
 RETURNS jsonb
 LANGUAGE sql
 SET search_path TO ''
AS $function$
  select jsonb_build_object('outcome', 'erased', 'erased', public.retention_batch(p_before, p_limit))
$function$;
comment on function public.retention_run(p_before timestamp with time zone, p_limit integer) is 'public.retention_batch as {"outcome": "erased", "erased": n}, for the cron (lib/retention.ts).';

CREATE OR REPLACE FUNCTION public.revoke_invitation(p_invitation_id uuid, p_by uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
  delete from public.organization_invitations i
  where i.id = p_invitation_id and i.accepted_at is null
    and exists (select from public.organization_members m
      where m.organization_id = i.organization_id and m.user_id = p_by
        and m.role in ('owner', 'admin'));
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  return jsonb_build_object('outcome', 'revoked');
end
$function$;
comment on function public.revoke_invitation(p_invitation_id uuid, p_by uuid) is 'An owner or admin withdraws an invitation not yet accepted (its token then joins no one); not_found for one accepted, gone, or not theirs to revoke. The invitation route revokes one whose mail could not be sent.';

CREATE OR REPLACE FUNCTION public.set_member_cap(p_organization_id uuid, p_user_id uuid, p_by uuid, p_cap integer, p_now timestamp with time zone DEFAULT now())
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_by_role text;
  v_role text;
  v_plan public.plans;
begin
  if p_cap < 0 then
    return jsonb_build_object('outcome', 'invalid_cap');
  end if;
  select m.role into v_by_role from public.organization_members m
  where m.organization_id = p_organization_id and m.user_id = p_by;
  if v_by_role is null then
    return jsonb_build_object('outcome', 'not_a_member');
  end if;
  if v_by_role = 'member' then
    return jsonb_build_object('outcome', 'forbidden');
  end if;
  select m.role into v_role from public.organization_members m
  where m.organization_id = p_organization_id and m.user_id = p_user_id
  for update;
  if v_role is null then
    return jsonb_build_object('outcome', 'no_such_member');
  end if;
  if v_role = 'owner' and v_by_role <> 'owner' then
    return jsonb_build_object('outcome', 'forbidden');
  end if;
  update public.organization_members m set cap = p_cap
  where m.organization_id = p_organization_id and m.user_id = p_user_id;
  select p.* into v_plan from public.organizations o join public.plans p on p.id = o.plan
  where o.id = p_organization_id;
  return jsonb_build_object('outcome', 'updated', 'member',
    private.member_json(p_organization_id, p_user_id,
      private.period_start(v_plan.period, p_now), v_plan.meter));
end
$function$;
comment on function public.set_member_cap(p_organization_id uuid, p_user_id uuid, p_by uuid, p_cap integer, p_now timestamp with time zone) is 'An owner or admin (else forbidden; not_a_member for someone outside) sets a member''s cap (null: none; invalid_cap below 0); an admin never an owner''s. A cap below what the member holds refuses their next enqueues, and ends nothing. Answers the member as the overview does.';

CREATE OR REPLACE FUNCTION public.start_job(p_job_id uuid, p_lease_seconds integer DEFAULT 90, p_now timestamp with time zone DEFAULT now())
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_old public.generation_jobs;
  v_consumed integer;
  v_result jsonb;
begin
  select * into v_old from public.generation_jobs j where j.id = p_job_id for update;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  if v_old.status in ('succeeded', 'failed', 'canceled') then
    return jsonb_build_object('outcome', 'already_final', 'job', private.job_json(v_old));
  end if;
  if v_old.status = 'queued' and v_old.resume_at > p_now then
    return jsonb_build_object('outcome', 'not_ready', 'job', private.job_json(v_old));
  end if;
  if v_old.status = 'running' and v_old.lease_expires_at > p_now then
    return jsonb_build_object('outcome', 'already_running', 'job', private.job_json(v_old));
  end if;

  v_consumed := v_old.consumed + case when v_old.status = 'running'
    then private.running_cost(v_old) else 0 end;
  if v_old.meter in ('tokens', 'money') and v_consumed + v_old.hold > 2 * v_old.hold then
    update public.generation_jobs j set consumed = v_consumed where j.id = p_job_id
    returning * into v_old;
    -- The dead attempt is in consumed now: the ending attempt is none (p_own 0).
    return jsonb_build_object('outcome', 'budget_exhausted', 'job', private.job_json(
      private.end_with_refund(v_old, 'failed', 'attempt_budget_exhausted', null, 'failed', p_now,
        jsonb_build_object('reason', 'attempt_budget_exhausted', 'consumed', v_consumed), 0)));
  end if;

  with started as (
    update public.generation_jobs j
    set status = 'running',
        attempts = j.attempts + 1,
        lease_expires_at = p_now + make_interval(secs => p_lease_seconds),
        resume_at = null,
        waiting_for = null,
        started_at = p_now,
        partial_output = null,
        partial_tokens = 0,
        thinking = false,
        reasoning_tokens = null,
        progress_at = null,
        consumed = v_consumed,
        updated_at = p_now
    where j.id = p_job_id
      and ((j.status = 'queued' and (j.resume_at is null or j.resume_at <= p_now))
        or (j.status = 'running' and j.lease_expires_at <= p_now))
    returning j.*
  ), tier as (
    -- The plan's tier; a flex job that has waited for capacity for the plan's fallback time
    -- runs this attempt on the default tier.
    select s.id,
      case when p.service_tier = 'flex' and p.flex_fallback_after_seconds is not null
          and s.capacity_wait_since is not null
          and s.capacity_wait_since + make_interval(secs => p.flex_fallback_after_seconds) <= p_now
        then 'default' else p.service_tier end as service_tier
    from started s join public.plans p on p.id = s.plan_id
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select s.id, s.user_id, p_now,
      case when v_old.status = 'running' then 'reclaimed' else 'started' end,
      v_old.status, s.status,
      jsonb_build_object('attempt', s.attempts, 'service_tier', t.service_tier)
    from started s join tier t on t.id = s.id
  )
  select jsonb_build_object(
    'outcome', 'started',
    'job', to_jsonb(s) - 'request_hash',
    'max_output_tokens', p.max_output_tokens,
    'service_tier', t.service_tier,
    'reasoning_effort', p.reasoning_effort,
    'flex_fallback_after_seconds', p.flex_fallback_after_seconds
  ) into v_result
  from started s join public.plans p on p.id = s.plan_id join tier t on t.id = s.id;
  if v_result is null then
    raise exception 'job % could not be claimed', p_job_id using errcode = 'P0001';
  end if;
  return v_result;
end
$function$;
comment on function public.start_job(p_job_id uuid, p_lease_seconds integer, p_now timestamp with time zone) is 'Claim: queued (past resume_at) or running with an expired lease → running, attempts + 1, with the plan''s output bound and the service tier of this attempt (the plan''s; default once a flex job waited for capacity for the plan''s flex_fallback_after_seconds). A token plan''s job whose next attempt could take it past 2 × hold ends failed (attempt_budget_exhausted, capturing least(hold, consumed)) instead: budget_exhausted.';

CREATE OR REPLACE FUNCTION public.sweep_jobs(p_now timestamp with time zone DEFAULT now(), p_batch_size integer DEFAULT 100, p_lease_grace_seconds integer DEFAULT 300, p_undelivered_after_seconds integer DEFAULT 900, p_max_age_seconds integer DEFAULT 10800, p_max_republish integer DEFAULT 1)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_old public.generation_jobs;
  v_seen integer := 0;
  v_done jsonb;
  v_failed jsonb := '[]'::jsonb;
  v_republish jsonb := '[]'::jsonb;
begin
  -- One sweep at a time (above): a second waits here, before it holds anything.
  perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('quota_jobs.sweep', 0));

  -- Each reason walks its own partial index in order and stops at the batch size, so a batch
  -- costs the same with a hundred stale jobs or a hundred thousand. A job that matches two
  -- reasons is ended by the first; the later walks no longer see it as active.

  for v_old in
    select j.* from public.generation_jobs j
    where private.stale_past_max_age(j, p_now, p_max_age_seconds)
    order by j.created_at
    limit p_batch_size
    for update skip locked
  loop
    v_seen := v_seen + 1;
    v_failed := v_failed || (private.sweep_one(v_old, 'max_age_exceeded', p_now) -> 'failed');
  end loop;

  for v_old in
    select j.* from public.generation_jobs j
    where private.stale_lease_expired(j, p_now, p_lease_grace_seconds)
    order by j.lease_expires_at
    limit greatest(p_batch_size - v_seen, 0)
    for update skip locked
  loop
    v_seen := v_seen + 1;
    v_failed := v_failed || (private.sweep_one(v_old, 'lease_expired', p_now) -> 'failed');
  end loop;

  for v_old in
    select j.* from public.generation_jobs j
    where private.stale_undelivered(j, p_now, p_undelivered_after_seconds)
    order by private.queued_due_since(j)
    limit greatest(p_batch_size - v_seen, 0)
    for update skip locked
  loop
    v_seen := v_seen + 1;
    v_done := private.sweep_one(
      v_old,
      case when v_old.republish_count < p_max_republish then 'republish' else 'never_delivered' end,
      p_now
    );
    if v_done ? 'republish' then
      v_republish := v_republish || jsonb_build_array(v_done -> 'republish');
    else
      v_failed := v_failed || (v_done -> 'failed');
    end if;
  end loop;

  return jsonb_build_object(
    'outcome', 'swept',
    'failed', v_failed,
    'republish', v_republish,
    'more', v_seen >= p_batch_size
  );
end
$function$;
comment on function public.sweep_jobs(p_now timestamp with time zone, p_batch_size integer, p_lease_grace_seconds integer, p_undelivered_after_seconds integer, p_max_age_seconds integer, p_max_republish integer) is 'Ends what nobody else will, one batch, one sweep at a time (a second waits for the first to commit; rows locked with skip locked): jobs older than the max age, running jobs whose lease expired more than the grace ago, and queued jobs never delivered (republished once, then failed). Every failure refunds. Returns the failed jobs, the jobs to republish (publish_seq grew) and whether more may remain.';

CREATE OR REPLACE FUNCTION public.user_pseudonym(p_user_id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
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
$function$;
comment on function public.user_pseudonym(p_user_id uuid) is 'The user''s log pseudonym (private.user_pseudonyms), made on first use; user_not_found for a user without an auth.users row (erased, or never created). Security definer: the table is private.';

CREATE OR REPLACE FUNCTION public.watched_models(p_default_model text DEFAULT NULL::text)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  with used as (
    select coalesce(p.model, p_default_model) as model, p.id as plan_id
    from public.plans p
    where coalesce(p.model, p_default_model) is not null
    union
    select k.model, k.plan_id from public.plan_kinds k where k.model is not null
  )
  select jsonb_build_object('outcome', 'listed', 'models', coalesce(jsonb_agg(jsonb_build_object(
    'model', u.model,
    'plans', u.plans,
    'priced', m.id is not null,
    'shutdown_date', m.shutdown_date,
    'checked_at', m.catalogue_checked_at
  ) order by u.model), '[]'::jsonb))
  from (select u.model, jsonb_agg(u.plan_id order by u.plan_id) as plans from used u group by u.model) u
  left join public.models m on m.id = u.model
$function$;
comment on function public.watched_models(p_default_model text) is 'Every model a plan or one of its kinds runs on (a plan naming none: p_default_model, the deployment''s OPENAI_MODEL), with the plans that use it, whether the price book has it, and the shutdown date last read from the provider.';

-- triggers ----------------------------------------------------------------------------------------

CREATE TRIGGER erase_user_data BEFORE DELETE ON auth.users FOR EACH ROW EXECUTE FUNCTION private.erase_deleted_user();
CREATE TRIGGER forget_invitations_to AFTER DELETE ON auth.users FOR EACH ROW EXECUTE FUNCTION private.forget_invitations_to();
CREATE TRIGGER generation_jobs_document_input BEFORE INSERT ON public.generation_jobs FOR EACH ROW EXECUTE FUNCTION private.document_input();
CREATE TRIGGER generation_jobs_drop_output_chunks AFTER UPDATE OF status, attempts, erased_at ON public.generation_jobs FOR EACH ROW WHEN (old.status = 'running'::text AND ((new.status = ANY (ARRAY['queued'::text, 'succeeded'::text])) OR new.attempts <> old.attempts) OR old.erased_at IS NULL AND new.erased_at IS NOT NULL) EXECUTE FUNCTION private.drop_output_chunks();
CREATE TRIGGER generation_jobs_final_is_final BEFORE UPDATE ON public.generation_jobs FOR EACH ROW WHEN (old.status = ANY (ARRAY['succeeded'::text, 'failed'::text, 'canceled'::text])) EXECUTE FUNCTION private.forbid_changing_final_jobs();
CREATE TRIGGER job_events_append_only BEFORE DELETE OR UPDATE ON public.job_events FOR EACH ROW EXECUTE FUNCTION private.forbid_changing_events();
CREATE TRIGGER job_events_broadcast_state AFTER INSERT ON public.job_events FOR EACH ROW WHEN (new.from_status IS DISTINCT FROM new.to_status) EXECUTE FUNCTION private.broadcast_job_state();
CREATE CONSTRAINT TRIGGER plan_kinds_check_model AFTER INSERT OR UPDATE OF model ON public.plan_kinds NOT DEFERRABLE INITIALLY IMMEDIATE FOR EACH ROW EXECUTE FUNCTION private.check_plan_kind_model();
CREATE CONSTRAINT TRIGGER plans_check_kind_models AFTER UPDATE OF service_tier, max_output_tokens, reasoning_effort ON public.plans NOT DEFERRABLE INITIALLY IMMEDIATE FOR EACH ROW EXECUTE FUNCTION private.check_plan_kind_model();
CREATE TRIGGER plans_check_model BEFORE INSERT OR UPDATE ON public.plans FOR EACH ROW EXECUTE FUNCTION private.check_plan_model();
CREATE TRIGGER plans_offer_documents AFTER INSERT ON public.plans FOR EACH ROW EXECUTE FUNCTION private.offer_documents();

-- row level security policies ---------------------------------------------------------------------

create policy "users read their own jobs" on public.generation_jobs as permissive for select to authenticated using ((user_id = ( SELECT auth.uid() AS uid)));
create policy "users read their own job events" on public.job_events as permissive for select to authenticated using ((user_id = ( SELECT auth.uid() AS uid)));
create policy "job kinds are readable by signed-in users" on public.job_kinds as permissive for select to authenticated using (true);
create policy "users read their own jobs' output" on public.job_output_chunks as permissive for select to authenticated using ((EXISTS ( SELECT
   FROM public.generation_jobs j
  WHERE ((j.id = job_output_chunks.job_id) AND (j.user_id = ( SELECT auth.uid() AS uid))))));
create policy "members read their own usage, owners and admins their members'" on public.organization_member_usage as permissive for select to authenticated using (((user_id = ( SELECT auth.uid() AS uid)) OR (organization_id IN ( SELECT private.managed_organizations() AS managed_organizations))));
create policy "members read their own membership" on public.organization_members as permissive for select to authenticated using ((user_id = ( SELECT auth.uid() AS uid)));
create policy "owners and admins read their members" on public.organization_members as permissive for select to authenticated using ((organization_id IN ( SELECT private.managed_organizations() AS managed_organizations)));
create policy "owners and admins read their pool" on public.organization_usage as permissive for select to authenticated using ((organization_id IN ( SELECT private.managed_organizations() AS managed_organizations)));
create policy "members read their organization" on public.organizations as permissive for select to authenticated using ((EXISTS ( SELECT
   FROM public.organization_members m
  WHERE ((m.organization_id = organizations.id) AND (m.user_id = ( SELECT auth.uid() AS uid))))));
create policy "plan kinds are readable by signed-in users" on public.plan_kinds as permissive for select to authenticated using (true);
create policy "plans are readable by signed-in users" on public.plans as permissive for select to authenticated using (true);
create policy "users read their own usage" on public.quota_usage as permissive for select to authenticated using ((user_id = ( SELECT auth.uid() AS uid)));
create policy "users read their own plan" on public.user_plans as permissive for select to authenticated using ((user_id = ( SELECT auth.uid() AS uid)));
create policy "a user hears their own jobs' states" on realtime.messages as permissive for select to authenticated using (((extension = 'broadcast'::text) AND (realtime.topic() = ('job:'::text || (( SELECT auth.uid() AS uid))::text))));

-- privileges (what each role holds on our objects, beside their owner) ----------------------------

grant delete, insert, maintain, references, select, trigger, truncate, update on table private.user_pseudonyms to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.erased_usage to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.generation_jobs to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.job_events to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.job_kinds to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.job_output_chunks to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.model_tiers to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.models to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.organization_invitations to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.organization_member_usage to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.organization_members to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.organization_usage to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.organizations to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.plan_kinds to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.plans to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.quota_drift to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.quota_usage to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.superseded_callbacks to service_role;
grant delete, insert, maintain, references, select, trigger, truncate, update on table public.user_plans to service_role;
grant execute on function private.attempt_cost(p_job public.generation_jobs, p_prompt integer, p_cached integer, p_completion integer, p_served_tier text, p_reported boolean) to service_role;
grant execute on function private.broadcast_job_state() to service_role;
grant execute on function private.cancel_refunds(p_job public.generation_jobs) to service_role;
grant execute on function private.check_kind_models(p_plan_id text, p_kind text) to service_role;
grant execute on function private.check_plan_kind_model() to service_role;
grant execute on function private.check_plan_model() to service_role;
grant execute on function private.document_input() to service_role;
grant execute on function private.drop_output_chunks() to service_role;
grant execute on function private.end_with_refund(p_job public.generation_jobs, p_status text, p_reason text, p_error text, p_event text, p_now timestamp with time zone, p_detail jsonb, p_own integer, p_running_cancel boolean) to service_role;
grant execute on function private.ending_json(j public.generation_jobs) to service_role;
grant execute on function private.enqueue_in_organization(p_organization_id uuid, p_user_id uuid, p_plan public.plans, p_period_start timestamp with time zone, p_cap integer, p_active integer, p_hold bigint, p_job jsonb, p_now timestamp with time zone) to service_role;
grant execute on function private.erase_deleted_user() to service_role;
grant execute on function private.erase_user_data(p_user_id uuid, p_now timestamp with time zone) to service_role;
grant execute on function private.erasing(p_table regclass) to service_role;
grant execute on function private.events_complete_since() to service_role;
grant execute on function private.forbid_changing_events() to service_role;
grant execute on function private.forbid_changing_final_jobs() to service_role;
grant execute on function private.forget_invitations_to() to service_role;
grant execute on function private.generation_job_valid(j public.generation_jobs) to service_role;
grant execute on function private.held_prices(p_model text, p_tier text) to service_role;
grant execute on function private.job_json(j public.generation_jobs) to service_role;
grant execute on function private.keep_erased_cost(p_jobs uuid[], p_canceled_by text, p_now timestamp with time zone) to service_role;
grant execute on function private.log_event(p_job public.generation_jobs, p_event text, p_from_status text, p_now timestamp with time zone, p_detail jsonb) to service_role;
grant execute on function private.managed_organizations() to authenticated;
grant execute on function private.managed_organizations() to service_role;
grant execute on function private.member_json(p_organization_id uuid, p_user_id uuid, p_start timestamp with time zone, p_meter text) to service_role;
grant execute on function private.offer_documents() to service_role;
grant execute on function private.open_periods_since(p_now timestamp with time zone) to service_role;
grant execute on function private.ops_buckets(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval) to service_role;
grant execute on function private.organization_usage_json(p_organization_id uuid, p_user_id uuid, p_plan public.plans, p_now timestamp with time zone) to service_role;
grant execute on function private.partial_output(j public.generation_jobs) to service_role;
grant execute on function private.period_end(p_period text, p_start timestamp with time zone) to service_role;
grant execute on function private.period_start(p_period text, p_now timestamp with time zone) to service_role;
grant execute on function private.plan_for(p_user_id uuid) to service_role;
grant execute on function private.plan_kinds_json(p_plan_id text) to service_role;
grant execute on function private.queued_due_since(j public.generation_jobs) to service_role;
grant execute on function private.quota_drift_since(p_since timestamp with time zone) to service_role;
grant execute on function private.refund(p_job public.generation_jobs, p_now timestamp with time zone) to service_role;
grant execute on function private.refund_bound(p_plan public.plans) to service_role;
grant execute on function private.running_cost(p_job public.generation_jobs) to service_role;
grant execute on function private.stale_lease_expired(j public.generation_jobs, p_now timestamp with time zone, p_lease_grace_seconds integer) to service_role;
grant execute on function private.stale_past_max_age(j public.generation_jobs, p_now timestamp with time zone, p_max_age_seconds integer) to service_role;
grant execute on function private.stale_undelivered(j public.generation_jobs, p_now timestamp with time zone, p_undelivered_after_seconds integer) to service_role;
grant execute on function private.sweep_one(p_old public.generation_jobs, p_reason text, p_now timestamp with time zone) to service_role;
grant execute on function private.usage_cost(p_job public.generation_jobs, p_usage jsonb) to service_role;
grant execute on function private.usage_json(p_user_id uuid, p_plan public.plans, p_now timestamp with time zone) to service_role;
grant execute on function private.usage_object(p_plan public.plans, p_period_start timestamp with time zone, p_used integer, p_active bigint) to service_role;
grant execute on function private.usage_tokens(p_usage jsonb) to service_role;
grant execute on function private.user_email(p_user_id uuid) to service_role;
grant execute on function private.user_exists(p_user_id uuid) to service_role;
grant execute on function private.with_usage(p_detail jsonb, p_usage jsonb) to service_role;
grant execute on function public.accept_invitation(p_token text, p_user_id uuid, p_now timestamp with time zone) to service_role;
grant execute on function public.cancel_job(p_job_id uuid, p_user_id uuid, p_now timestamp with time zone) to service_role;
grant execute on function public.complete_job(p_job_id uuid, p_attempt integer, p_output text, p_now timestamp with time zone, p_usage jsonb) to service_role;
grant execute on function public.create_invitation(p_organization_id uuid, p_by uuid, p_role text, p_cap integer, p_expires_at timestamp with time zone, p_now timestamp with time zone, p_email text) to service_role;
grant execute on function public.delete_organization(p_organization_id uuid, p_by uuid, p_now timestamp with time zone) to service_role;
grant execute on function public.enqueue_job(p_user_id uuid, p_prompt text, p_idempotency_key text, p_now timestamp with time zone, p_prompt_tokens integer, p_kind text, p_input jsonb, p_model text, p_organization_id uuid) to service_role;
grant execute on function public.erase_user(p_user_id uuid, p_now timestamp with time zone) to service_role;
grant execute on function public.export_user(p_user_id uuid, p_after_created_at timestamp with time zone, p_after_id uuid, p_limit integer) to service_role;
grant execute on function public.fail_job(p_job_id uuid, p_reason text, p_error text, p_attempt integer, p_now timestamp with time zone, p_usage jsonb, p_seq integer) to service_role;
grant execute on function public.get_job(p_job_id uuid, p_user_id uuid) to service_role;
grant execute on function public.get_usage(p_user_id uuid, p_now timestamp with time zone) to service_role;
grant execute on function public.list_jobs(p_user_id uuid, p_limit integer, p_before_created_at timestamp with time zone, p_before_id uuid) to service_role;
grant execute on function public.maintain_job_events(p_before timestamp with time zone, p_now timestamp with time zone, p_months_ahead integer, p_max_drops integer) to service_role;
grant execute on function public.my_organizations(p_user_id uuid, p_now timestamp with time zone) to service_role;
grant execute on function public.ops_failure_reasons(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval) to service_role;
grant execute on function public.ops_job_series(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval) to service_role;
grant execute on function public.ops_latency_series(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval) to service_role;
grant execute on function public.ops_metrics(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval, p_now timestamp with time zone, p_lease_grace_seconds integer, p_undelivered_after_seconds integer, p_max_age_seconds integer) to service_role;
grant execute on function public.ops_now(p_now timestamp with time zone, p_lease_grace_seconds integer, p_undelivered_after_seconds integer, p_max_age_seconds integer) to service_role;
grant execute on function public.ops_plans(p_default_model text, p_attempts integer) to service_role;
grant execute on function public.ops_provider_series(p_from timestamp with time zone, p_to timestamp with time zone, p_bucket interval) to service_role;
grant execute on function public.organization_overview(p_organization_id uuid, p_by uuid, p_now timestamp with time zone) to service_role;
grant execute on function public.plan_worst_case(p_default_model text, p_attempts integer, p_prompt_tokens integer) to service_role;
grant execute on function public.record_attempt_usage(p_job_id uuid, p_attempt integer, p_usage jsonb, p_now timestamp with time zone) to service_role;
grant execute on function public.record_model_catalogue(p_model text, p_shutdown_date date, p_now timestamp with time zone) to service_role;
grant execute on function public.record_progress(p_job_id uuid, p_attempt integer, p_offset integer, p_text text, p_completion_tokens integer, p_now timestamp with time zone, p_prompt_tokens integer, p_thinking boolean, p_reasoning_tokens integer) to service_role;
grant execute on function public.release_job(p_job_id uuid, p_attempt integer, p_error text, p_now timestamp with time zone, p_usage jsonb) to service_role;
grant execute on function public.remove_member(p_organization_id uuid, p_user_id uuid, p_by uuid, p_now timestamp with time zone) to service_role;
grant execute on function public.requeue_job(p_job_id uuid, p_attempt integer, p_resume_at timestamp with time zone, p_error text, p_max_hits integer, p_max_age_seconds integer, p_now timestamp with time zone, p_count_hit boolean, p_usage jsonb, p_capacity boolean) to service_role;
grant execute on function public.retention_batch(p_before timestamp with time zone, p_limit integer) to service_role;
grant execute on function public.retention_run(p_before timestamp with time zone, p_limit integer) to service_role;
grant execute on function public.revoke_invitation(p_invitation_id uuid, p_by uuid) to service_role;
grant execute on function public.set_member_cap(p_organization_id uuid, p_user_id uuid, p_by uuid, p_cap integer, p_now timestamp with time zone) to service_role;
grant execute on function public.start_job(p_job_id uuid, p_lease_seconds integer, p_now timestamp with time zone) to service_role;
grant execute on function public.sweep_jobs(p_now timestamp with time zone, p_batch_size integer, p_lease_grace_seconds integer, p_undelivered_after_seconds integer, p_max_age_seconds integer, p_max_republish integer) to service_role;
grant execute on function public.user_pseudonym(p_user_id uuid) to service_role;
grant execute on function public.watched_models(p_default_model text) to service_role;
grant select on table private.history_horizon to service_role;
grant select on table public.generation_jobs to authenticated;
grant select on table public.job_events to authenticated;
grant select on table public.job_kinds to authenticated;
grant select on table public.job_output_chunks to authenticated;
grant select on table public.organization_member_usage to authenticated;
grant select on table public.organization_members to authenticated;
grant select on table public.organization_usage to authenticated;
grant select on table public.organizations to authenticated;
grant select on table public.plan_kinds to authenticated;
grant select on table public.plans to authenticated;
grant select on table public.quota_usage to authenticated;
grant select on table public.user_plans to authenticated;
grant select, update, usage on sequence public.job_events_id_seq to service_role;
grant select, update, usage on sequence public.superseded_callbacks_id_seq to service_role;
grant usage on schema private to authenticated;
grant usage on schema private to service_role;
grant usage on schema public to anon;
grant usage on schema public to authenticated;
grant usage on schema public to public;
grant usage on schema public to service_role;

-- default privileges ------------------------------------------------------------------------------

-- (all schemas) functions: postgres execute
-- private functions: service_role execute
-- private sequences: service_role select, update, usage
-- private tables: service_role delete, insert, maintain, references, select, trigger, truncate, update
-- public functions: service_role execute
-- public sequences: service_role select, update, usage
-- public tables: service_role delete, insert, maintain, references, select, trigger, truncate, update
